"""Run several decoding methods over the same prompts in one process and compare them honestly.

- Every method sees identical prompt ids. Multi-turn samples (MT-bench) build turn 2 from AR's turn-1
  answer, so the prompt is the same for every method.
- Warm-up generations (one per method) are excluded; everything after is counted, nothing dropped.
- The method order is a new permutation each turn (:func:`turn_order`), so drift in machine speed and what a
  method inherits from the one before it do not favour one method; each speedup gets a 90% interval over
  the turns (:func:`fastforward.core.metrics.speedup_interval`).
- ``identical_to_ar`` compares each method's tokens with the greedy AR tokens of the same prompt.
- Every finished turn goes to ``on_turn`` (the CLI appends it to a sample log,
  :mod:`fastforward.bench.samplelog`); turns in ``saved`` (from an interrupted run) are counted from their
  records instead of being generated again, and the method order of each turn is the same as in an
  uninterrupted run.
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from fastforward import hardware
from fastforward.bench.report import ar_like, noise_floor, within_noise  # ar_like: one token a step
from fastforward.core.compiled import BUCKETS, compiled, tier, tiers
from fastforward.core.decoder import Decoder, GenerationConfig
from fastforward.core.engine import warm_buckets
from fastforward.core.memory import frozen_heap, huge_pages
from fastforward.core.metrics import DecodeTotals, generation_record, speedup_interval
from fastforward.core.stats import DecodeStats
from fastforward.data import Sample, render_prompt
from fastforward.decoders.speculative import draft_models
from fastforward.errors import FastForwardError
from fastforward.log import log
from fastforward.models.loading import LoadedModel

BASELINE = "ar"


@dataclass
class MethodTotals:
    """One method's totals plus the per-generation records the result file keeps (every sample counted)."""

    totals: DecodeTotals = field(default_factory=DecodeTotals)
    samples: list[dict[str, Any]] = field(default_factory=list)

    def add(self, sample: Sample, turn: int, stats: DecodeStats, identical: bool | None, text: str) -> None:
        self.totals.add(stats, identical)
        self.samples.append(
            {
                "id": sample.id,
                "dataset": sample.dataset,
                "turn": turn,
                **generation_record(stats, identical),
                "text": text,
            }
        )

    def restore(self, saved: dict[str, Any]) -> None:
        """Count a generation from its sample-log entry (see :func:`turn_entry`) as if it had just run."""
        c = saved["counters"]
        stats = DecodeStats(
            method="restored",
            new_tokens=c["new_tokens"],
            target_forwards=c["target_forwards"],
            wall_time_s=c["wall_time_s"],
            draft_time_s=c["draft_time_s"],
            extras=c["extras"],
            width_hist=list(c.get("width_hist", [])),  # logs written before widths were recorded: none
        )
        self.totals.add(stats, saved["record"]["identical_to_ar"])
        self.samples.append(saved["record"])


def turn_entry(record: dict[str, Any], stats: DecodeStats) -> dict[str, Any]:
    """One method's part of a sample-log line: its ``per_sample`` record and the exact counters its totals
    sum (the record's wall time is rounded; draft time and extras are not in it)."""
    counters = {
        "new_tokens": stats.new_tokens,
        "target_forwards": stats.target_forwards,
        "wall_time_s": stats.wall_time_s,
        "draft_time_s": stats.draft_time_s,
        "extras": stats.extras,
        "width_hist": stats.width_hist,
    }
    return {"record": record, "counters": counters}


def cache_sizes(target: LoadedModel, samples: list[Sample], max_new_tokens: int) -> tuple[int, ...]:
    """The compiled forward's fixed-cache sizes this run's requests can land in: from the shortest first
    turn to the longest conversation with every earlier answer at full length (so no request compiles a
    graph while it is being timed)."""
    runner = compiled(target.model)
    assert runner is not None
    tok = target.tokenizer
    first = [len(render_prompt(tok, [{"role": "user", "content": s.turns[0]}])) for s in samples]
    whole = []
    for s in samples:
        messages: list[dict[str, str]] = []
        for text in s.turns:
            messages += [{"role": "user", "content": text}, {"role": "assistant", "content": ""}]
        whole.append(len(render_prompt(tok, messages[:-1])) + len(s.turns) * max_new_tokens)
    low = tier(runner.capacity, min(first) + max_new_tokens + BUCKETS[-1]) or runner.capacity
    high = tier(runner.capacity, max(whole) + BUCKETS[-1]) or runner.capacity
    return tuple(t for t in tiers(runner.capacity) if low <= t <= high)


def reads_hidden_states(decoder: Decoder) -> bool:
    """Whether the decoder's verify forwards return the target's hidden states (Chimera's draft reads them),
    which runs graphs of their own; False for a decoder that is not a proposer (a peer's ``generate()``, the
    llama.cpp reference)."""
    make = getattr(decoder, "proposer", None)
    try:
        return make is not None and bool(getattr(make(solo=True), "hidden_states", False))
    except FastForwardError:
        return False


def warm_graphs(target: LoadedModel, decoders: Mapping[str, Decoder], sizes: tuple[int, ...]) -> float:
    """Before timing, compile (or load) every graph the run's decoders will use over the fixed-cache
    ``sizes``, so no request pays for one while timed: the 1-token bucket when every method is AR-like (the
    wider ones would only lengthen its start), else every width bucket, and the same again with hidden
    states when a decoder reads them. Returns the seconds spent."""
    ar_only = all(ar_like(n) for n in decoders)
    widths = (1,) if ar_only else BUCKETS
    spent = warm_buckets(target.model, widths, sizes=sizes)
    which = "the 1-token bucket" if ar_only else "every width bucket"
    drafts = {id(m): m for d in decoders.values() for m in draft_models(getattr(d, "drafter", None))}
    for model in drafts.values():  # a compiled draft steps through its 1-token graph (ModelEngine.feed)
        spent += warm_buckets(model, (1,), sizes=sizes)
    if drafts:
        which += f" (and the 1-token bucket of {len(drafts)} draft model{'s' * (len(drafts) > 1)})"
    if any(reads_hidden_states(d) for d in decoders.values()):
        spent += warm_buckets(target.model, widths, hidden=True, sizes=sizes)
        which += ", with and without hidden states,"
    log(
        f"--compile: warming {which} over {'/'.join(map(str, sizes))} cache slots before timing ({spent:.0f} s)"
    )
    return spent


def run_bench(
    target: LoadedModel,
    decoders: dict[str, Decoder],
    samples: list[Sample],
    config: GenerationConfig,
    dataset: str,
    warmup: int = 1,
    resolved: dict[str, Any] | None = None,
    saved: Mapping[tuple[int, int], dict[str, Any]] | None = None,
    on_turn: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Run every decoder on every turn of ``samples``; ``saved``/``on_turn``: see the module docstring."""
    if BASELINE not in decoders:
        raise ValueError("the AR baseline must be among the decoders")
    names = list(decoders)
    tok = target.tokenizer
    saved = saved or {}
    todo = sum(len(s.turns) for s in samples) - sum((i, t) in saved for i, s in enumerate(samples)
                                                    for t in range(len(s.turns)))  # fmt: skip
    if saved:
        log(f"resuming: {len(saved)} turns done, {todo} to go")

    if warmup and samples and todo and compiled(target.model) is not None:
        warm_graphs(target, decoders, cache_sizes(target, samples, config.max_new_tokens))
    if warmup and samples and todo:
        ids = render_prompt(tok, [{"role": "user", "content": samples[0].turns[0]}])
        warm = replace(config, max_new_tokens=min(16, config.max_new_tokens))  # same sampling, constraint
        for _ in range(warmup):
            for n in names:
                decoders[n].generate(ids, warm)
        for n in names:  # the warm-up paid for first-call costs; its timings must not decide the run
            decoders[n].reopen_estimates()

    huge = settle_pages() if todo else 0
    with frozen_heap():  # no full collection lands on one method's timed generation (memory.freeze_heap)
        totals = _timed_turns(decoders, names, samples, config, tok, saved, on_turn)
    return {
        **_summary(target, decoders, names, totals, config, dataset, warmup, resolved),
        "huge_page_bytes": huge,
    }


def settle_pages() -> int:
    """Put what the warm-up loaded (the compiled packages' weights, the caches) on huge pages before anything
    is timed (:func:`fastforward.core.memory.huge_pages`), and say so; the process's bytes on huge pages."""
    start = time.perf_counter()
    huge = huge_pages()
    if huge:
        log(f"{huge / 1e9:.2f} GB of this process on 2 MB pages ({time.perf_counter() - start:.1f} s)")
    return huge


def turn_order(names: list[str], turn: int) -> list[str]:
    """The order the methods run in on the ``turn``-th turn of a bench: a permutation drawn from the turn's
    number (seeded by a string, so the same in every run and process), so positions and neighbours vary
    from turn to turn.

    Why not a rotation (before session 48): a rotation keeps every method's neighbours. AR always ran right
    after the llama.cpp row's subprocess, and jacobi always right after AR, so whatever a method inherits
    from the one before it was charged to the same method every turn. (The SmolLM2 bf16 runs of session 48
    found no such effect larger than ~2% on this EPYC, results/compiled_s48; the design no longer depends
    on it.)"""
    return random.Random(f"bench-turn-{turn}").sample(names, len(names))


REWARM_TOKENS = 16  # untimed AR tokens after a row that ran in another process (rewarm)


def rewarm(ar: Decoder, ids: list[int], config: GenerationConfig) -> None:
    """A short untimed AR generation in this process, run after a reference row that decodes in a process
    of its own (llama.cpp) and before the next method is timed, so that method does not pay for the state
    the other process left (our weights out of the caches, idle worker threads).

    Why: the method right after the llama.cpp row ran slower. SmolLM2 W8A8, AR alternated with llama.cpp
    Q8_0 on the Ice Lake Xeon: its prefill 165 ms on average right after llama.cpp against 140 ms a
    generation later, its decode 2-5% slower (session 56, results/compiled_s56/after_llamacpp.txt). And
    the turn orders are fixed by the turn's number: on 8 GSM8K turns of ar, lookahead, recycle and llama.cpp,
    lookahead ran right after llama.cpp in 5, AR in none, and lookahead read 0.95-0.96x of AR at 100% AR
    steps in two runs. AR keeps nothing across requests, so the extra request changes no method's state."""
    ar.generate(ids, replace(config, max_new_tokens=min(REWARM_TOKENS, config.max_new_tokens)))


def _timed_turns(
    decoders: dict[str, Decoder],
    names: list[str],
    samples: list[Sample],
    config: GenerationConfig,
    tok: Any,
    saved: Mapping[tuple[int, int], dict[str, Any]],
    on_turn: Callable[[dict[str, Any]], None] | None,
) -> dict[str, MethodTotals]:
    """Every decoder on every turn of ``samples``, in a new order each turn (:func:`turn_order`); a turn in
    ``saved`` is restored instead of run."""
    greedy = config.sampling.greedy
    totals = {n: MethodTotals() for n in names}
    k = 0
    for si, sample in enumerate(samples):
        messages: list[dict[str, str]] = []
        for turn, user in enumerate(sample.turns):
            messages.append({"role": "user", "content": user})
            order = turn_order(names, k)
            k += 1
            if (si, turn) in saved:
                entry = saved[(si, turn)]
                for n in names:
                    totals[n].restore(entry["methods"][n])
                messages.append({"role": "assistant", "content": entry["assistant"]})
                continue
            ids = render_prompt(tok, messages)
            results = {}
            for n in order:
                results[n] = decoders[n].generate(ids, config)
                if getattr(decoders[n], "separate_process", False):  # last in its turn too: the next
                    rewarm(decoders[BASELINE], ids, config)  # turn's first method would follow it
            ref = results[BASELINE].tokens
            answer = tok.decode(ref, skip_special_tokens=True)
            entries = {}
            for n in names:
                same = (results[n].tokens == ref) if greedy else None
                text = tok.decode(results[n].tokens, skip_special_tokens=True)
                totals[n].add(sample, turn, results[n].stats, same, text)
                entries[n] = turn_entry(totals[n].samples[-1], results[n].stats)
            messages.append({"role": "assistant", "content": answer})
            if on_turn is not None:
                on_turn({"index": si, "id": sample.id, "turn": turn, "assistant": answer, "methods": entries})
            line = ", ".join(f"{n} {results[n].stats.tokens_per_s:.1f}" for n in names)
            log(f"[{si + 1}/{len(samples)}] {sample.id} turn {turn + 1}: tok/s {line}")
    return totals


def _interval(method: MethodTotals, base: MethodTotals) -> list[float] | None:
    """The 90% bootstrap interval of ``method``'s speedup over ``base`` from their per-turn records (same
    turns, same order), rounded to 3 places; None when it cannot be drawn."""
    pairs = [
        ((m["new_tokens"], m["wall_time_s"]), (b["new_tokens"], b["wall_time_s"]))
        for m, b in zip(method.samples, base.samples, strict=False)
        if (m["id"], m["turn"]) == (b["id"], b["turn"])
    ]
    if len(pairs) != len(base.samples):
        return None
    got = speedup_interval([p[0] for p in pairs], [p[1] for p in pairs])
    return None if got is None else [round(got[0], 3), round(got[1], 3)]


def _summary(
    target: LoadedModel,
    decoders: dict[str, Decoder],
    names: list[str],
    totals: dict[str, MethodTotals],
    config: GenerationConfig,
    dataset: str,
    warmup: int,
    resolved: dict[str, Any] | None,
) -> dict[str, Any]:
    """The bench's result: per method its totals, what ran (AR steps, widths) and its per-sample records,
    with the run's provenance."""
    base_tps = totals[BASELINE].totals.tokens_per_s
    methods: dict[str, Any] = {}
    for n in names:
        t = totals[n].totals
        tps = t.tokens_per_s
        methods[n] = {
            "tokens_per_s": tps,
            "speedup_vs_ar": tps / base_tps if base_tps else 0.0,
            # how far the turns let that figure move (bootstrap over turns, metrics.speedup_interval)
            "speedup_interval_90": None if n == BASELINE else _interval(totals[n], totals[BASELINE]),
            "mean_accepted_tokens": t.mean_accepted_tokens,
            "identical_to_ar": t.identical_rate,
            "samples": len(totals[n].samples),
            "new_tokens": t.new_tokens,
            "wall_time_s": t.wall_time_s,
            "target_forwards": t.target_forwards,
            "draft_time_share": t.draft_time_share,
            # what ran: plain AR steps (a gate's or gamma_auto's fallback, a draft that found nothing)
            # vs parallel ones, so a method that was mostly AR cannot pass for a result of its own
            "ar_steps": t.ar_steps,
            "parallel_steps": t.parallel_steps,
            "ar_step_share": t.ar_step_share,
            "drafted_tokens": t.drafted_tokens,
            "mean_width": t.mean_width,
            "width_hist": t.width_hist,
            **({"auto_choice": t.extras["auto_choice"]} if "auto_choice" in t.extras else {}),
            "lossless": decoders[n].lossless,  # of the configured decoder: chimera accept=typical is lossy
            "extras": t.extras,
            "per_sample": totals[n].samples,
        }
    out: dict[str, Any] = {
        "model": target.name,
        "dtype": target.dtype,
        "path": getattr(target.model, "fastforward_path", "default"),
        "weights": getattr(target.model, "fastforward_weights", "full"),
        "fp32_logits": bool(getattr(target.model, "fastforward_fp32_logits", False)),
        "engine": "compiled" if compiled(target.model) is not None else "eager",
        # the widths with graphs (--buckets): a forward pads up to the next, runs eagerly past the widest
        # serial_rows: graphs built so that no row's sum is split across threads (core.aot.serial_row_chunk),
        # what makes compiled W8A8 exact at every width (session 53); results without it are labelled like int8
        **(
            {"compiled_widths": list(r.widths), "serial_rows": True}
            if (r := compiled(target.model)) is not None
            else {}
        ),
        "dataset": dataset,
        "hardware": hardware.describe(),
        **hardware.provenance(),
        "max_new_tokens": config.max_new_tokens,
        "sampling": asdict(config.sampling),
        # structured output: every method (AR included) decoded under this constraint
        "constraint": None
        if config.constraint is None
        else {"kind": config.constraint.kind, "spec": config.constraint.spec},
        "warmup_generations_excluded": warmup * len(names),
        "command": " ".join(sys.argv),
        "config": resolved or {},
        "methods": methods,
    }
    if (floor := noise_floor(methods)) is not None:  # a tagged AR row: how far AR moves against itself
        out["noise_floor"] = {**floor, "within": within_noise(methods, floor)}
    if "hf_generate" in methods:
        out["ar_vs_hf_generate"] = methods[BASELINE]["tokens_per_s"] / max(
            methods["hf_generate"]["tokens_per_s"], 1e-9
        )
    return out

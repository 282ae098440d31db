"""Throughput at batch > 1: every method decodes all prompts through the continuous-batching scheduler.

``bench --batch-size N`` (and ``scripts/batch_results.py``) measure what a server or an offline job sees:
all prompts are queued at once, at most N rows run together, a finished row's slot goes to the next
prompt. Per method:

- ``aggregate_tok_s``: every new token of every prompt / the wall time of the whole pass (prefills and
  scheduling included, warm-up excluded);
- ``speedup_vs_batched_ar``: that over our batched AR in the same run;
- ``tokens_per_forward``: new tokens / target forwards, per row (a row's prefill and every batched forward
  it took part in count once), summed over rows: vanilla AR = 1.00;
- ``latency_*``: per request, queue time included (all submitted at the start);
- ``identical_to_batched_ar``: share of prompts whose tokens equal batched AR's in this run (greedy).

transformers' ``generate()`` runs as method ``hf_generate`` over static left-padded batches of N prompts
(sorted by length, as :func:`fastforward.core.batched.batched_greedy` does): a batch ends when its longest
answer does, which is what batching without a scheduler costs.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from fastforward.core.batched import batched_greedy
from fastforward.core.batching import batched
from fastforward.core.decoder import Decoder, GenerationConfig
from fastforward.errors import FastForwardError

BASELINE = "ar"
HF = "hf_generate"


def percentile(values: list[float], q: float) -> float:
    """The q-quantile (0..1) by linear interpolation; 0 for no values."""
    if not values:
        return 0.0
    s = sorted(values)
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def run_hf(model, prompts: list[list[int]], config: GenerationConfig, batch_size: int) -> dict[str, Any]:
    """transformers' batched generate() over static batches; latency = when the prompt's batch ended."""
    if not config.sampling.greedy:
        raise FastForwardError("hf_generate in batch mode is measured greedy only")
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    tokens: list[list[int]] = [[] for _ in prompts]
    latency = [0.0] * len(prompts)
    t0 = time.perf_counter()
    for s in range(0, len(order), batch_size):
        idx = order[s : s + batch_size]
        out = batched_greedy(
            model, [prompts[i] for i in idx], config.max_new_tokens, config.eos_token_ids, batch_size
        )
        now = time.perf_counter() - t0
        for i, toks in zip(idx, out, strict=True):
            tokens[i], latency[i] = toks, now
    wall = time.perf_counter() - t0
    new = sum(len(t) for t in tokens)
    return {
        "tokens": tokens,
        "wall_time_s": wall,
        "new_tokens": new,
        "target_forwards": new,  # one forward per token per row (generate() does not report its own)
        "latencies": latency,
        "ttft": [],
        "batch": {},
    }


def run_method(
    decoder: Decoder,
    prompts: list[list[int]],
    config: GenerationConfig,
    batch_size: int,
    token_budget: int,
    layout: str = "padded",
) -> dict[str, Any]:
    bd = batched(decoder, batch_size, token_budget, layout)
    t0 = time.perf_counter()
    reqs = bd.generate_many(prompts, config)
    wall = time.perf_counter() - t0
    stats = [r.result.stats for r in reqs]
    return {
        "tokens": [r.result.tokens for r in reqs],
        "wall_time_s": wall,
        "new_tokens": sum(s.new_tokens for s in stats),
        "target_forwards": sum(s.target_forwards for s in stats),
        "latencies": [r.latency_s for r in reqs],
        "ttft": [r.first_token_at - r.submitted_at for r in reqs],
        "batch": bd.stats.to_dict(),
        "extras": _sum_extras([s.extras for s in stats]),
    }


def _sum_extras(extras: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for e in extras:
        for k, v in e.items():
            if isinstance(v, int | float) and not isinstance(v, bool):
                out[k] = out.get(k, 0) + v
    return out


def run_batch_bench(
    target,
    decoders: dict[str, Decoder | None],
    prompts: list[list[int]],
    config: GenerationConfig,
    batch_size: int,
    token_budget: int = 0,
    warmup: bool = True,
    progress: Callable[[str], None] | None = None,
    layout: str = "padded",
) -> dict[str, Any]:
    """Every method over every prompt at ``batch_size``; ``decoders[HF]`` may be None (transformers'
    generate() needs no decoder). Returns {method: record} with the keys in the module docstring."""
    if BASELINE not in decoders:
        raise ValueError("the batched AR baseline must be among the methods")
    names = [BASELINE] + [n for n in decoders if n != BASELINE]
    model = target.model
    if warmup:  # one short pass per method, excluded
        warm = replace(config, max_new_tokens=8)  # same sampling, same constraint
        head = prompts[: max(1, min(batch_size, len(prompts)))]
        for n in names:
            if n == HF:
                run_hf(model, head, warm, batch_size)
            else:
                run_method(decoders[n], head, warm, batch_size, token_budget, layout)
    raw: dict[str, dict[str, Any]] = {}
    for n in names:
        raw[n] = (
            run_hf(model, prompts, config, batch_size)
            if n == HF
            else run_method(decoders[n], prompts, config, batch_size, token_budget, layout)
        )
        if progress:
            r = raw[n]
            progress(f"batch {batch_size} {n}: {r['new_tokens'] / r['wall_time_s']:.1f} tok/s aggregate")
    base = raw[BASELINE]
    base_tps = base["new_tokens"] / base["wall_time_s"]
    out: dict[str, Any] = {}
    for n in names:
        r = raw[n]
        tps = r["new_tokens"] / r["wall_time_s"] if r["wall_time_s"] > 0 else 0.0
        same = [a == b for a, b in zip(r["tokens"], base["tokens"], strict=True)]
        out[n] = {
            "aggregate_tok_s": tps,
            "speedup_vs_batched_ar": tps / base_tps if base_tps else 0.0,
            "tokens_per_forward": r["new_tokens"] / r["target_forwards"] if r["target_forwards"] else 0.0,
            "identical_to_batched_ar": sum(same) / len(same) if config.sampling.greedy else None,
            "new_tokens": r["new_tokens"],
            "wall_time_s": r["wall_time_s"],
            "latency_mean_s": statistics.fmean(r["latencies"]),
            "latency_p50_s": percentile(r["latencies"], 0.5),
            "latency_p90_s": percentile(r["latencies"], 0.9),
            "ttft_mean_s": statistics.fmean(r["ttft"]) if r["ttft"] else None,
            "batch": r["batch"],
            "extras": r.get("extras", {}),
            "tokens": r["tokens"],
        }
    return out


def markdown_table(records: list[dict[str, Any]]) -> str:
    head = (
        "| model | dtype | batch | method | aggregate tok/s | vs batched AR | tokens/forward | "
        "identical to AR fp32 | latency p50 s |\n|---|---|---|---|---|---|---|---|---|"
    )
    rows = [
        f"| {r['model']} | {r['dtype']} | {r['batch_size']} | {r['method']} | {r['aggregate_tok_s']:.1f} | "
        f"{r['speedup_vs_batched_ar']:.2f}x | {r['tokens_per_forward']:.2f} | "
        f"{_fmt(r.get('identical_to_ar_fp32'))} | {r.get('latency_p50_s', 0.0):.2f} |"
        for r in records
    ]
    return "\n".join([head, *rows])


def _fmt(v: Any) -> str:
    return "-" if v is None else str(v)

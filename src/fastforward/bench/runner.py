"""Run several decoding methods over the same prompts in one process and compare them honestly.

- Every method sees identical prompt ids. Multi-turn samples (MT-bench) build turn 2 from AR's turn-1
  answer, so the prompt is the same for every method.
- Warm-up generations (one per method) are excluded; everything after is counted, nothing dropped.
- The method order rotates from prompt to prompt, so drift in machine speed does not favour one method.
- ``identical_to_ar`` compares each method's tokens with the greedy AR tokens of the same prompt.
"""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass, field
from typing import Any

from fastforward.bench import hardware
from fastforward.core.decoder import Decoder, GenerationConfig
from fastforward.core.stats import DecodeStats
from fastforward.data import Sample, render_prompt
from fastforward.decoders.registry import METHODS, base_method
from fastforward.models.loading import LoadedModel, log

BASELINE = "ar"


@dataclass
class MethodTotals:
    new_tokens: int = 0
    wall_time_s: float = 0.0
    target_forwards: int = 0
    draft_time_s: float = 0.0
    identical: int = 0
    compared: int = 0
    samples: list[dict[str, Any]] = field(default_factory=list)
    extras: dict[str, Any] = field(default_factory=dict)

    def add(self, sample: Sample, turn: int, stats: DecodeStats, identical: bool | None, text: str) -> None:
        self.new_tokens += stats.new_tokens
        self.wall_time_s += stats.wall_time_s
        self.target_forwards += stats.target_forwards
        self.draft_time_s += stats.draft_time_s
        if identical is not None:
            self.compared += 1
            self.identical += int(identical)
        _merge_extras(self.extras, stats.extras)
        self.samples.append(
            {
                "id": sample.id,
                "dataset": sample.dataset,
                "turn": turn,
                "new_tokens": stats.new_tokens,
                "wall_time_s": round(stats.wall_time_s, 4),
                "target_forwards": stats.target_forwards,
                "identical_to_ar": identical,
                "text": text,
            }
        )


def _merge_extras(acc: dict[str, Any], new: dict[str, Any]) -> None:
    """Sum numeric extras; sum lists of numbers element-wise (per-position counts). Other types: last wins."""
    for k, v in new.items():
        if isinstance(v, bool) or not isinstance(v, (int, float, list)):
            acc[k] = v
        elif isinstance(v, list):
            cur = acc.setdefault(k, [])
            if all(isinstance(x, (int, float)) for x in v):
                cur.extend([0] * (len(v) - len(cur)))
                for i, x in enumerate(v):
                    cur[i] += x
        else:
            acc[k] = acc.get(k, 0) + v


def prompts_for(sample: Sample) -> int:
    return len(sample.turns)


def run_bench(
    target: LoadedModel,
    decoders: dict[str, Decoder],
    samples: list[Sample],
    config: GenerationConfig,
    dataset: str,
    warmup: int = 1,
    resolved: dict[str, Any] | None = None,
) -> dict[str, Any]:
    if BASELINE not in decoders:
        raise ValueError("the AR baseline must be among the decoders")
    names = list(decoders)
    tok = target.tokenizer
    greedy = config.sampling.greedy

    if warmup and samples:
        ids = render_prompt(tok, [{"role": "user", "content": samples[0].turns[0]}])
        warm = GenerationConfig(
            max_new_tokens=min(16, config.max_new_tokens),
            eos_token_ids=config.eos_token_ids,
            sampling=config.sampling,
        )
        for _ in range(warmup):
            for n in names:
                decoders[n].generate(ids, warm)

    totals = {n: MethodTotals() for n in names}
    k = 0
    for si, sample in enumerate(samples):
        messages: list[dict[str, str]] = []
        for turn, user in enumerate(sample.turns):
            messages.append({"role": "user", "content": user})
            ids = render_prompt(tok, messages)
            order = names[k % len(names) :] + names[: k % len(names)]
            k += 1
            results = {n: decoders[n].generate(ids, config) for n in order}
            ref = results[BASELINE].tokens
            for n in names:
                same = (results[n].tokens == ref) if greedy else None
                text = tok.decode(results[n].tokens, skip_special_tokens=True)
                totals[n].add(sample, turn, results[n].stats, same, text)
            messages.append({"role": "assistant", "content": tok.decode(ref, skip_special_tokens=True)})
            line = ", ".join(f"{n} {results[n].stats.tokens_per_s:.1f}" for n in names)
            log(f"[{si + 1}/{len(samples)}] {sample.id} turn {turn + 1}: tok/s {line}")

    base_tps = _tps(totals[BASELINE])
    methods: dict[str, Any] = {}
    for n in names:
        t = totals[n]
        tps = _tps(t)
        methods[n] = {
            "tokens_per_s": tps,
            "speedup_vs_ar": tps / base_tps if base_tps else 0.0,
            "mean_accepted_tokens": t.new_tokens / t.target_forwards if t.target_forwards else None,
            "identical_to_ar": t.identical / t.compared if t.compared else None,
            "samples": len(t.samples),
            "new_tokens": t.new_tokens,
            "wall_time_s": t.wall_time_s,
            "target_forwards": t.target_forwards,
            "draft_time_share": t.draft_time_s / t.wall_time_s if t.wall_time_s else 0.0,
            "lossless": METHODS[base_method(n)].lossless if base_method(n) in METHODS else None,
            "extras": t.extras,
            "per_sample": t.samples,
        }
    out: dict[str, Any] = {
        "model": target.name,
        "dtype": target.dtype,
        "dataset": dataset,
        "hardware": hardware.describe(),
        "max_new_tokens": config.max_new_tokens,
        "sampling": asdict(config.sampling),
        "warmup_generations_excluded": warmup * len(names),
        "command": " ".join(sys.argv),
        "config": resolved or {},
        "methods": methods,
    }
    if "hf_generate" in methods:
        out["ar_vs_hf_generate"] = methods[BASELINE]["tokens_per_s"] / max(
            methods["hf_generate"]["tokens_per_s"], 1e-9
        )
    return out


def _tps(t: MethodTotals) -> float:
    return t.new_tokens / t.wall_time_s if t.wall_time_s else 0.0

"""The CLLM learning curve: Jacobi tokens per forward against training tokens.

``train-cllm --snapshot-every N`` leaves loadable bf16 model directories under ``OUT/snapshots/step-N``.
Here the base model, each snapshot and the final model decode the same held-out prompts with the greedy
Jacobi decoder, and we count mean accepted tokens per target forward (prefill counted, Spec-Bench
convention), fast-forwarded tokens per iteration and the repetition rate of the outputs. These are counts,
not timings, so the curve can be measured on a busy machine; speed is ``eval-cllm``'s job.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from fastforward.cllm.evaluate import decode_all
from fastforward.core.decoder import GenerationConfig
from fastforward.data import render_prompt
from fastforward.decoders.registry import build_decoder
from fastforward.errors import FastForwardError
from fastforward.eval.repetition import is_repetitive
from fastforward.models.loading import load_model


@dataclass(frozen=True)
class CurvePoint:
    label: str  # "base", "step-200", ..., "final"
    step: int
    train_tokens: int  # packed tokens fed to the trainer up to this point
    mean_accepted_tokens: float  # Jacobi new tokens / target forwards
    fast_forward_per_iteration: float
    repetition_rate: float  # fraction of outputs the cleaning rules call repetitive
    new_tokens: int
    prompts: int


def curve_models(run_dir: str | Path) -> list[tuple[str, Path, int, int]]:
    """(label, path, step, train_tokens) for every complete snapshot of a run, then the final model."""
    run = Path(run_dir)
    found: list[tuple[str, Path, int, int]] = []
    for meta in (run / "snapshots").glob("step-*/snapshot.json"):
        try:
            m = json.loads(meta.read_text())
            found.append((meta.parent.name, meta.parent, int(m["step"]), int(m["train_tokens"])))
        except (ValueError, KeyError, TypeError) as e:
            raise FastForwardError(f"{meta}: corrupt snapshot metadata ({e})") from None
    found.sort(key=lambda t: t[2])
    final = run / "cllm_training.json"
    if final.exists():
        try:
            m = json.loads(final.read_text(encoding="utf-8"))
        except ValueError as e:
            raise FastForwardError(f"{final}: corrupt training metadata ({e})") from None
        if not found or found[-1][2] != int(m["steps"]):
            found.append(("final", run, int(m["steps"]), int(m["train_tokens"])))
    if not found:
        raise FastForwardError(f"{run}: no snapshots (train with --snapshot-every N) and no final model")
    return found


def measure(
    ref: str | Path,
    messages: list[list[dict[str, str]]],
    block_size: int,
    max_new_tokens: int,
    dtype: str = "bfloat16",
    device: str = "cpu",
) -> dict[str, Any]:
    """Greedy Jacobi decoding of every prompt with one model; summed counts (no prompt dropped)."""
    lm = load_model(str(ref), dtype, device)
    dec = build_decoder("jacobi", lm, None, {"block_size": block_size})
    gen = GenerationConfig(max_new_tokens=max_new_tokens, eos_token_ids=lm.eos_token_ids)
    prompts = [render_prompt(lm.tokenizer, msgs) for msgs in messages]
    outputs, totals = decode_all(dec, prompts, gen, warmup=0)
    new, ex = totals.new_tokens, totals.extras
    repetitive = sum(is_repetitive(o) for o in outputs)
    return {
        "mean_accepted_tokens": totals.mean_accepted_tokens or 0.0,
        "fast_forward_per_iteration": ex.get("fast_forward_tokens", 0)
        / max(1, ex.get("fixed_point_iterations", 0)),
        "repetition_rate": repetitive / max(1, len(messages)),
        "new_tokens": new,
        "prompts": len(messages),
    }


def as_json(points: list[CurvePoint], extra: dict[str, Any]) -> dict[str, Any]:
    return {**extra, "points": [asdict(p) for p in points]}

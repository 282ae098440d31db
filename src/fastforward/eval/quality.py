"""Task quality of a model's greedy answers on many prompts: accuracy, repetition, length.

Speed runs are batch 1 by design (latency is what we sell), which makes them too slow to measure accuracy on
hundreds of prompts on a CPU. Quality does not depend on how fast the answer was produced, only on which
tokens the greedy decoder picks, so here the prompts are decoded in left-padded batches
(:func:`fastforward.core.batched.batched_greedy`). In fp32 this reproduces our batch-1 AR decoder token for
token on the prompts we test (tests/test_quality.py); in bf16 padding changes the rounding and may move a few
answers, which is why the quality runs default to fp32.

Every prompt counts: no answer is dropped, truncated answers count as they are (usually wrong).
"""

from __future__ import annotations

import math
import shlex
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from fastforward.core.batched import batched_greedy
from fastforward.data import load_dataset, render_prompt
from fastforward.data.gsm8k import is_correct
from fastforward.errors import FastForwardError
from fastforward.eval.repetition import is_repetitive
from fastforward.hardware import describe, provenance
from fastforward.models.loading import load_model


@dataclass(frozen=True)
class QualityConfig:
    models: tuple[str, ...]
    dataset: str = "gsm8k"
    split: str = "heldout"
    limit: int | None = None
    max_new_tokens: int = 256
    dtype: str = "float32"
    batch_size: int = 16
    device: str = "cpu"
    data_path: str | None = None


def summarize(
    outputs: Sequence[Sequence[int]],
    texts: Sequence[str],
    golds: Sequence[str | None],
    eos_ids: Sequence[int],
    max_new_tokens: int,
) -> dict[str, Any]:
    """Accuracy (with its standard error), repetition rate, mean length, the share of answers cut at the cap,
    and the per-prompt marks behind them (``correct_per_prompt``: None where there is no gold answer)."""
    n = len(outputs)
    correct = [is_correct(t, g) if g is not None else None for t, g in zip(texts, golds, strict=True)]
    repetitive = [is_repetitive(o) for o in outputs]
    scored = [c for c in correct if c is not None]
    acc = sum(scored) / len(scored) if scored else None
    stderr = math.sqrt(acc * (1 - acc) / len(scored)) if scored and acc is not None else None
    return {
        "n": n,
        "correct": sum(scored) if scored else None,
        "accuracy": acc,
        "accuracy_stderr": stderr,
        "repetition_rate": sum(repetitive) / max(1, n),
        "mean_new_tokens": sum(len(o) for o in outputs) / max(1, n),
        "truncated_rate": sum(
            1 for o in outputs if len(o) >= max_new_tokens and (not o or o[-1] not in eos_ids)
        )
        / max(1, n),
        "correct_per_prompt": correct,
        "repetitive_per_prompt": repetitive,
    }


def paired(a: Sequence[bool], b: Sequence[bool]) -> dict[str, Any]:
    """Paired comparison of two models on the same prompts: accuracy difference and its standard error.

    ``b_minus_a`` is in accuracy units (0.01 = one point); the standard error comes from the discordant pairs
    (prompts one model solves and the other does not), the quantity McNemar's test uses.
    """
    if len(a) != len(b):
        raise FastForwardError("paired comparison needs the same prompts for both models")
    n = len(a)
    only_a = sum(1 for x, y in zip(a, b, strict=True) if x and not y)
    only_b = sum(1 for x, y in zip(a, b, strict=True) if y and not x)
    diff = (only_b - only_a) / n if n else 0.0
    var = ((only_a + only_b) / n - diff**2) / n if n else 0.0
    return {"b_minus_a": diff, "stderr": math.sqrt(max(var, 0.0)), "only_a": only_a, "only_b": only_b}


def answer_quality(
    loaded, samples: Sequence, max_new_tokens: int, batch_size: int, progress=None
) -> tuple[dict[str, Any], list[list[int]]]:
    """One model's batched greedy answers to ``samples`` (first user turn) and their :func:`summarize`."""
    tok, eos = loaded.tokenizer, loaded.eos_token_ids
    prompts = [render_prompt(tok, [{"role": "user", "content": s.turns[0]}]) for s in samples]
    outs = batched_greedy(loaded.model, prompts, max_new_tokens, eos, batch_size, progress)
    texts = [tok.decode(o, skip_special_tokens=True) for o in outs]
    return summarize(outs, texts, [s.answer for s in samples], eos, max_new_tokens), outs


def evaluate_quality(cfg: QualityConfig, log=None, command: list[str] | None = None) -> dict[str, Any]:
    """Greedy answers of each model on the same prompts -> per-model summary, per-sample marks, paired deltas."""
    log = log or (lambda m: print(m, file=sys.stderr, flush=True))
    if not cfg.models:
        raise FastForwardError("give at least one --model")
    samples = load_dataset(cfg.dataset, cfg.limit, split=cfg.split, data_path=cfg.data_path)
    if not samples:
        raise FastForwardError(f"no samples in {cfg.dataset} ({cfg.split})")
    t0 = time.perf_counter()
    models: dict[str, Any] = {}
    marks: dict[str, list[bool]] = {}
    for ref in cfg.models:
        loaded = load_model(ref, cfg.dtype, cfg.device)
        t = time.perf_counter()

        def progress(done: int, total: int, ref: str = ref, t: float = t) -> None:
            log(f"quality {ref}: {done}/{total} prompts ({time.perf_counter() - t:.0f} s)")

        summary, outs = answer_quality(loaded, samples, cfg.max_new_tokens, cfg.batch_size, progress)
        summary["wall_s"] = time.perf_counter() - t
        correct, repetitive = summary.pop("correct_per_prompt"), summary.pop("repetitive_per_prompt")
        summary["per_sample"] = [
            {"id": s.id, "correct": c, "repetitive": r, "new_tokens": len(o)}
            for s, o, c, r in zip(samples, outs, correct, repetitive, strict=True)
        ]
        marks[ref] = [bool(c) for c in correct]
        models[ref] = summary
        acc = summary["accuracy"]
        log(
            f"quality {ref}: accuracy {summary['correct']}/{len(samples)}"
            f" = {acc if acc is None else round(acc, 4)}, repetition {summary['repetition_rate']:.3f}"
        )
        del loaded
    first = cfg.models[0]
    deltas = {ref: paired(marks[first], marks[ref]) for ref in cfg.models[1:]}
    return {
        "models": models,
        "paired_vs_first": deltas,
        "wall_time_s": time.perf_counter() - t0,
        "hardware": describe(),
        **provenance(),
        "command": shlex.join(command) if command else None,
        "config": asdict(cfg),
    }

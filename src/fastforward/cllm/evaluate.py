"""Base model vs CLLM on held-out prompts: the numbers that say whether consistency training worked.

Per model, on the same prompts:
- speed dtype (bf16 by default): greedy AR and Jacobi (registry method ``jacobi``), timed; Jacobi tokens per
  forward (mean accepted tokens, prefill counted as a forward, Spec-Bench convention), fast-forwarded tokens
  per iteration and stationary tokens per block, speedup = Jacobi tok/s / AR tok/s;
- GSM8K accuracy of the greedy AR output and of the Jacobi output, repetition rate of the outputs;
- perplexity (fp32) of each model on the teacher's answers (the base model's greedy AR outputs);
- exactness (fp32): Jacobi output == the same model's greedy AR output, on the first ``exact_limit`` prompts;
- optionally (``quality_limit``), accuracy / repetition / length of the fp32 greedy answers on many more prompts
  (batched, see :mod:`fastforward.eval.quality`), because twenty prompts cannot resolve a 1.5-point accuracy
  difference; ``accuracy`` then reports that larger set (``accuracy_prompts`` says how many) and the result
  gets a paired CLLM - base difference with its standard error.
Every prompt counts in every statistic (no filtering).
"""

from __future__ import annotations

import contextlib
import json
import math
import shlex
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from fastforward.core.decoder import GenerationConfig
from fastforward.core.metrics import DecodeTotals
from fastforward.data import load_dataset, render_prompt
from fastforward.data.gsm8k import is_correct
from fastforward.decoders.registry import build_decoder
from fastforward.errors import FastForwardError
from fastforward.eval.quality import answer_quality, paired
from fastforward.eval.repetition import is_repetitive
from fastforward.hardware import describe, provenance
from fastforward.models.loading import load_model


@dataclass(frozen=True)
class EvalConfig:
    base: str
    cllm: str
    dataset: str = "gsm8k"
    split: str = "heldout"
    limit: int = 5
    block_size: int = 16
    max_new_tokens: int = 256
    speed_dtype: str = "bfloat16"
    exact_limit: int | None = None  # prompts for the fp32 exactness check (None = all)
    quality_limit: int = 0  # prompts for the batched fp32 quality run (0 = off)
    quality_batch_size: int = 16
    warmup: int = 1
    data_path: str | None = None
    device: str = "cpu"


def perplexity(model: torch.nn.Module, prompt: list[int], answer: list[int]) -> tuple[float, int]:
    """Summed NLL of ``answer`` given ``prompt`` and the number of answer tokens."""
    if not answer:
        return 0.0, 0
    ids = torch.tensor([prompt + answer], device=next(model.parameters()).device)
    with torch.inference_mode():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
    nll = torch.nn.functional.cross_entropy(logits, ids[0, len(prompt) :], reduction="sum")
    return float(nll), len(answer)


def decode_all(
    decoder, prompts: list[list[int]], gen: GenerationConfig, warmup: int
) -> tuple[list[list[int]], DecodeTotals]:
    """Every prompt's output tokens and the totals over all of them (the first ``warmup`` prompts are decoded
    once more beforehand, uncounted)."""
    for p in prompts[:warmup]:
        decoder.generate(p, gen)
    outs: list[list[int]] = []
    totals = DecodeTotals()
    for p in prompts:
        r = decoder.generate(p, gen)
        outs.append(r.tokens)
        totals.add(r.stats)
    return outs, totals


def _model_report(
    ref: str, cfg: EvalConfig, samples, teacher: list[list[int]] | None, log
) -> tuple[dict[str, Any], list[list[int]]]:
    speed = load_model(ref, cfg.speed_dtype, cfg.device)
    tok = speed.tokenizer
    prompts = [render_prompt(tok, [{"role": "user", "content": s.turns[0]}]) for s in samples]
    gen = GenerationConfig(max_new_tokens=cfg.max_new_tokens, eos_token_ids=speed.eos_token_ids)
    log(f"eval {ref}: AR and Jacobi ({cfg.speed_dtype}) on {len(prompts)} prompts")
    ar_out, ar = decode_all(build_decoder("ar", speed), prompts, gen, cfg.warmup)
    try:
        jac_dec = build_decoder("jacobi", speed, None, {"block_size": cfg.block_size})
    except (ModuleNotFoundError, FastForwardError) as e:
        raise FastForwardError(f"the jacobi decoder is not available: {e}") from None
    jac_out, jac = decode_all(jac_dec, prompts, gen, cfg.warmup)
    del speed

    fp32 = load_model(ref, "float32", cfg.device)
    n_exact = len(prompts) if cfg.exact_limit is None else min(cfg.exact_limit, len(prompts))
    log(f"eval {ref}: fp32 exactness on {n_exact} prompts, perplexity")
    exact = 0
    ar32, jac32 = (
        build_decoder("ar", fp32),
        build_decoder("jacobi", fp32, None, {"block_size": cfg.block_size}),
    )
    for p in prompts[:n_exact]:
        exact += ar32.generate(p, gen).tokens == jac32.generate(p, gen).tokens
    teacher = teacher if teacher is not None else ar_out
    nll, count = 0.0, 0
    for p, a in zip(prompts, teacher, strict=True):
        x, c = perplexity(fp32.model, p, a)
        nll, count = nll + x, count + c

    def text(ids: list[int]) -> str:
        return tok.decode(ids, skip_special_tokens=True)

    quality = None
    if cfg.quality_limit:
        quality = _quality(fp32, cfg, log)

    golds = [s.answer for s in samples]
    ex = jac.extras
    ar_tps, jac_tps = ar.tokens_per_s, jac.tokens_per_s
    report = {
        "model": ref,
        "prompts": len(prompts),
        "mean_accepted_tokens": jac.mean_accepted_tokens or 0.0,
        "fast_forward_per_iteration": ex.get("fast_forward_tokens", 0)
        / max(1, ex.get("fixed_point_iterations", 0)),
        "stationary_per_block": ex.get("stationary_tokens", 0) / max(1, ex.get("blocks", 0)),
        "iterations_per_block": ex.get("iterations", 0) / max(1, ex.get("blocks", 0)),
        "ar_tokens_per_s": ar_tps,
        "jacobi_tokens_per_s": jac_tps,
        "speedup_vs_ar": jac_tps / ar_tps if ar_tps else None,
        "accuracy": accuracy([text(o) for o in ar_out], golds),
        "accuracy_prompts": len(prompts),
        "jacobi_accuracy": accuracy([text(o) for o in jac_out], golds),
        "repetition_rate": sum(is_repetitive(o) for o in ar_out) / max(1, len(prompts)),
        "mean_new_tokens": ar.new_tokens / max(1, len(prompts)),
        "perplexity_on_teacher_answers": math.exp(nll / count) if count else None,
        "fp32_jacobi_equals_ar": f"{exact}/{n_exact}",
        "fp32_exact": exact == n_exact,
        "speed_dtype": cfg.speed_dtype,
    }
    if quality is not None:
        report["speed_run_accuracy"] = report["accuracy"]
        report["accuracy"] = quality["accuracy"]
        report["accuracy_prompts"] = quality["n"]
        report["quality"] = quality
    return report, ar_out


def _quality(fp32, cfg: EvalConfig, log) -> dict[str, Any]:
    """fp32 greedy answers to the first ``quality_limit`` prompts, batched: accuracy, repetition, marks."""
    samples = load_dataset(cfg.dataset, cfg.quality_limit, split=cfg.split, data_path=cfg.data_path)
    log(f"eval {fp32.name}: batched fp32 quality on {len(samples)} prompts")
    out, _ = answer_quality(fp32, samples, cfg.max_new_tokens, cfg.quality_batch_size)
    out["correct_per_prompt"] = [bool(c) for c in out["correct_per_prompt"]]
    del out["repetitive_per_prompt"]
    return out


def accuracy(texts: list[str], golds: list[str | None]) -> float | None:
    pairs = [(t, g) for t, g in zip(texts, golds, strict=True) if g is not None]
    return sum(is_correct(t, g) for t, g in pairs) / len(pairs) if pairs else None


def evaluate_cllm(cfg: EvalConfig, log=None, command: list[str] | None = None) -> dict[str, Any]:
    log = log or (lambda m: print(m, file=sys.stderr, flush=True))
    t0 = time.perf_counter()
    samples = load_dataset(cfg.dataset, cfg.limit, split=cfg.split, data_path=cfg.data_path)
    base, teacher = _model_report(cfg.base, cfg, samples, None, log)
    cllm, _ = _model_report(cfg.cllm, cfg, samples, teacher, log)
    training: dict[str, Any] = {}
    meta = Path(cfg.cllm) / "cllm_training.json"
    if meta.exists():
        with contextlib.suppress(OSError, ValueError):
            m = json.loads(meta.read_text())
            keys = ("steps", "train_tokens", "consistency_positions", "wall_time_s_this_run", "data_report")
            training = {k: m.get(k) for k in keys}
    delta = None
    if "quality" in base and "quality" in cllm:
        delta = paired(base["quality"]["correct_per_prompt"], cllm["quality"]["correct_per_prompt"])
    return {
        "base": base,
        "cllm": cllm,
        "accuracy_delta_cllm_minus_base": delta,
        "train_tokens": training.get("train_tokens"),
        "training": training or None,
        "wall_time_s": time.perf_counter() - t0,
        "hardware": describe(),
        **provenance(),
        "command": shlex.join(command) if command else None,
        "config": asdict(cfg),
    }

"""Base, CLLM and Jacobi Forcing models side by side on held-out prompts, with several Jacobi decoder
variants (plain, rejection recycling, multi-block), and quality measures that can see damage on a small model.

Per model, on the same prompts:
- speed (``speed_dtype``, bf16 by default): greedy AR once, then Jacobi with every decoder variant, timed
  (warm-up excluded); per variant tokens per target forward (prefill counted), tokens fed per decode
  forward (the width the CPU pays for), tok/s and speedup vs the same model's AR in the same run;
- exactness (fp32): every variant's output == the same model's greedy AR output, on ``exact_limit`` prompts
  (``identical_to_own_ar_fp32`` is the fraction);
- quality of the model's greedy (AR) answers: GSM8K accuracy, repetition rate, distinct-2/3, the *base*
  model's mean NLL per token of these answers (``nll_by_base``: does the tuned model still say what the base
  would find likely?) and the model's own NLL on the base's answers (``nll_on_base_answers``, the paper's
  perplexity check), both in fp32.

Every prompt counts in every statistic. A model's headline (``mean_accepted_tokens``, ``speedup_vs_ar``,
``decoder_options``) is its fastest variant in the run; all variants are listed under ``variants``.
"""

from __future__ import annotations

import contextlib
import json
import math
import shlex
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from fastforward.cllm.evaluate import accuracy, decode_all, perplexity
from fastforward.core.decoder import GenerationConfig
from fastforward.data import load_dataset, render_prompt
from fastforward.decoders.registry import build_decoder
from fastforward.eval.repetition import is_repetitive
from fastforward.hardware import describe, provenance
from fastforward.models.loading import load_model


@dataclass(frozen=True)
class CompareConfig:
    base: str
    models: tuple[tuple[str, str], ...] = ()  # (label, model) besides the base, e.g. ("cllm", "runs/x")
    variants: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...] = (("plain", ()),)  # (label, jacobi opts)
    dataset: str = "gsm8k"
    split: str = "heldout"
    limit: int = 20
    block_size: int = 16
    max_new_tokens: int = 128
    speed_dtype: str = "bfloat16"
    exact_limit: int = 10
    warmup: int = 1
    data_path: str | None = None
    device: str = "cpu"
    base_variants: bool = True  # False: the base only answers (AR), as the reference for the NLL measures
    extra: dict[str, Any] = field(default_factory=dict)


def distinct_n(outputs: Sequence[Sequence[int]], n: int) -> float:
    """Distinct n-grams / all n-grams, over every answer together (1.0 = no n-gram repeats)."""
    grams = [tuple(o[i : i + n]) for o in outputs for i in range(len(o) - n + 1)]
    return len(set(grams)) / len(grams) if grams else 0.0


def mean_nll(model, prompts: Sequence[list[int]], answers: Sequence[list[int]]) -> float | None:
    """Mean NLL per answer token of ``answers`` under ``model`` (fp32), every answer counted."""
    total, count = 0.0, 0
    for p, a in zip(prompts, answers, strict=True):
        x, c = perplexity(model, p, a)
        total, count = total + x, count + c
    return total / count if count else None


def training_meta(path: str) -> dict[str, Any]:
    """What the trainer recorded (steps, tokens, wall time, objective); empty for a model we did not train."""
    meta = Path(path) / "cllm_training.json"
    if not meta.exists():
        return {}
    with contextlib.suppress(OSError, ValueError):
        m = json.loads(meta.read_text())
        cfg = m.get("config") or {}
        return {
            "steps": m.get("steps"),
            "train_tokens": m.get("train_tokens"),
            "consistency_positions": m.get("consistency_positions"),
            "wall_time_s": m.get("wall_time_s", m.get("wall_time_s_this_run")),
            "objective": cfg.get("objective", "cllm"),
            "config": cfg,
        }
    return {}


def _speed(
    ref: str, cfg: CompareConfig, prompts, gen_for, log, variants_to_run
) -> tuple[dict[str, Any], list[list[int]]]:
    lm = load_model(ref, cfg.speed_dtype, cfg.device)
    gen = gen_for(lm)
    n = len(variants_to_run)
    log(f"compare {ref}: AR + {n} Jacobi variants ({cfg.speed_dtype}), {len(prompts)} prompts")
    ar_out, ar = decode_all(build_decoder("ar", lm), prompts, gen, cfg.warmup)
    variants: dict[str, Any] = {}
    for label, opts in variants_to_run:
        options = {"block_size": cfg.block_size, **dict(opts)}
        _, jac = decode_all(build_decoder("jacobi", lm, None, options), prompts, gen, cfg.warmup)
        ex = jac.extras
        forwards = max(1, jac.target_forwards - len(prompts))  # decode forwards (prefill excluded)
        variants[label] = {
            "decoder_options": options,
            "mean_accepted_tokens": jac.mean_accepted_tokens or 0.0,
            "tokens_per_s": jac.tokens_per_s,
            "speedup_vs_ar": jac.tokens_per_s / ar.tokens_per_s if ar.tokens_per_s else None,
            "tokens_fed_per_forward": ex["tokens_fed"] / forwards if "tokens_fed" in ex else None,
            "recycled_tokens": ex.get("recycled_tokens"),
            "spawned_blocks": ex.get("spawned_blocks"),
        }
        log(
            f"compare {ref}: {label:>10s} {variants[label]['mean_accepted_tokens']:.2f} tok/fwd "
            f"{variants[label]['speedup_vs_ar']:.2f}x"
        )
    return {"ar_tokens_per_s": ar.tokens_per_s, "variants": variants}, ar_out


def _exactness(fp32, cfg: CompareConfig, prompts, gen, variants_to_run) -> dict[str, float]:
    n = min(cfg.exact_limit, len(prompts)) if variants_to_run else 0
    ar = [build_decoder("ar", fp32).generate(p, gen).tokens for p in prompts[:n]]
    out: dict[str, float] = {}
    for label, opts in variants_to_run:
        dec = build_decoder("jacobi", fp32, None, {"block_size": cfg.block_size, **dict(opts)})
        same = sum(dec.generate(p, gen).tokens == a for p, a in zip(prompts[:n], ar, strict=True))
        out[label] = same / n if n else 0.0
    return out


def compare(cfg: CompareConfig, log=None, command: list[str] | None = None) -> dict[str, Any]:
    log = log or (lambda m: print(m, file=sys.stderr, flush=True))
    t0 = time.perf_counter()
    samples = load_dataset(cfg.dataset, cfg.limit, split=cfg.split, data_path=cfg.data_path)
    golds = [s.answer for s in samples]
    base32 = load_model(cfg.base, "float32", cfg.device)
    tok = base32.tokenizer
    prompts = [render_prompt(tok, [{"role": "user", "content": s.turns[0]}]) for s in samples]

    def gen_for(lm) -> GenerationConfig:
        return GenerationConfig(max_new_tokens=cfg.max_new_tokens, eos_token_ids=lm.eos_token_ids)

    result: dict[str, Any] = {}
    base_answers: list[list[int]] | None = None
    for label, ref in (("base", cfg.base), *cfg.models):
        runs = cfg.variants if (label != "base" or cfg.base_variants) else ()
        speed, answers = _speed(ref, cfg, prompts, gen_for, log, runs)
        if base_answers is None:
            base_answers = answers
        fp32 = base32 if label == "base" else load_model(ref, "float32", cfg.device)
        log(f"compare {ref}: fp32 exactness on {min(cfg.exact_limit, len(prompts))} prompts, NLLs")
        exact = _exactness(fp32, cfg, prompts, gen_for(fp32), runs)
        best = max(
            speed["variants"], key=lambda v: speed["variants"][v]["speedup_vs_ar"] or 0.0, default=None
        )
        for v, rec in speed["variants"].items():
            rec["identical_to_own_ar_fp32"] = exact[v]
        texts = [tok.decode(a, skip_special_tokens=True) for a in answers]
        train = training_meta(ref)
        head = speed["variants"][best] if best else {}
        result[label] = {
            "model": ref,
            "prompts": len(prompts),
            "mean_accepted_tokens": head.get("mean_accepted_tokens"),
            "speedup_vs_ar": head.get("speedup_vs_ar"),
            "decoder_options": head.get("decoder_options"),
            "best_variant": best,
            "identical_to_own_ar_fp32": min(exact.values()) if exact else None,
            "accuracy": accuracy(texts, golds),
            "nll_by_base": mean_nll(base32.model, prompts, answers),
            "nll_on_base_answers": mean_nll(fp32.model, prompts, base_answers),
            "repetition_rate": sum(is_repetitive(a) for a in answers) / max(1, len(answers)),
            "distinct_2": distinct_n(answers, 2),
            "distinct_3": distinct_n(answers, 3),
            "mean_new_tokens": sum(len(a) for a in answers) / max(1, len(answers)),
            "train_tokens": train.get("train_tokens", 0),
            "wall_time_s": train.get("wall_time_s", 0.0),
            "training": train or None,
            "ar_tokens_per_s": speed["ar_tokens_per_s"],
            "variants": speed["variants"],
        }
        if label != "base":
            del fp32
    return {
        **result,
        **cfg.extra,
        "eval_wall_time_s": time.perf_counter() - t0,
        "hardware": describe(),
        **provenance(),
        "command": shlex.join(command) if command else None,
        "config": _jsonable(asdict(cfg)),
    }


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    return x if x is None or isinstance(x, (str, int, float, bool)) else str(x)


def nan_free(x: Any) -> Any:
    """JSON has no NaN: undefined measures become null."""
    if isinstance(x, float) and math.isnan(x):
        return None
    if isinstance(x, dict):
        return {k: nan_free(v) for k, v in x.items()}
    if isinstance(x, list):
        return [nan_free(v) for v in x]
    return x

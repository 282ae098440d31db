"""results/batch.json: throughput of every batched method at batch 1, 4, 8, 16 on two models, one run.

For each model (loaded once, bf16 where the CPU has native bf16): the methods decode the same prompts through
the continuous-batching scheduler at each batch size (:func:`fastforward.bench.batch.run_batch_bench`),
batched AR and transformers' batched generate() (``hf_generate``) included. ``identical_to_ar_fp32`` comes
from a separate fp32 check on the same model: each method's batched rows vs unbatched greedy AR on
``--check-prompts`` prompts (the bf16 timing run reports ``identical_to_batched_ar`` beside it).

Finished (model, batch size) groups are written to the output as they complete and skipped on a rerun, so
an interrupted run loses at most the group in flight.

    python scripts/batch_results.py            # both models, ~40 min on a 2-core AVX-512 CPU
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

from fastforward import hardware
from fastforward.bench.batch import HF, run_batch_bench
from fastforward.bench.samplelog import atomic_write_text
from fastforward.core.decoder import GenerationConfig
from fastforward.data import load_dataset, render_prompt
from fastforward.decoders.ar import ARDecoder
from fastforward.decoders.batched import batched
from fastforward.decoders.registry import build_decoder
from fastforward.log import log
from fastforward.models.loading import load_model

TUNED = {"gamma": 3, "ngram_min": 2}  # prompt lookup that drafts only on a 2-gram match, 3 tokens at most

PLANS = {
    # model: (dataset, [(label, method, options)], draft, max_new_tokens, {batch size: prompts})
    "smollm2-135m": (
        "humaneval",
        [
            ("ar", "ar", {}),
            ("pld", "pld", {}),
            ("pld:g3n2", "pld", TUNED),
            ("jacobi", "jacobi", {}),
            ("layerskip", "layerskip", {}),
        ],
        None,
        128,
        {1: 4, 4: 8, 8: 16, 16: 32},
    ),
    "qwen2.5-coder-1.5b": (
        "humaneval",
        [("ar", "ar", {}), ("pld", "pld", {}), ("pld:g3n2", "pld", TUNED), ("sd", "sd", {})],
        "qwen2.5-coder-0.5b",
        128,
        {1: 2, 4: 4, 8: 8, 16: 16},
    ),
}


def prompts_for(tok, dataset: str, n: int) -> list[list[int]]:
    return [render_prompt(tok, [{"role": "user", "content": s.turns[0]}]) for s in load_dataset(dataset, n)]


def fp32_check(name: str, plan, n_prompts: int, tokens: int) -> dict[str, bool]:
    """Each method's batched rows (batch 4) vs unbatched greedy AR, fp32."""
    dataset, methods, draft_name, _, _ = plan
    target = load_model(name, "float32")
    draft = load_model(draft_name, "float32") if draft_name else None
    prompts = prompts_for(target.tokenizer, dataset, n_prompts)
    cfg = GenerationConfig(tokens, tuple(target.eos_token_ids))
    ar = ARDecoder(target.model)
    ref = [ar.generate(p, cfg).tokens for p in prompts]
    out = {}
    for label, m, opts in methods:
        dec = build_decoder(m, target, draft if m == "sd" else None, opts)
        got = [r.result.tokens for r in batched(dec, 4).generate_many(prompts, cfg)]
        out[label] = got == ref
        same = sum(g == r for g, r in zip(got, ref, strict=True))
        log(f"fp32 check {name} {label}: {same}/{len(ref)} identical")
    out[HF] = None  # transformers' own; not ours to certify
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", action="append", default=None, help="default: both models of PLANS")
    ap.add_argument("--batch", default="1,4,8,16")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--check-prompts", type=int, default=4)
    ap.add_argument("--check-tokens", type=int, default=32)
    ap.add_argument("--out", default="results/batch.json")
    a = ap.parse_args()
    out_path = Path(a.out)
    result = json.loads(out_path.read_text()) if out_path.exists() else {"runs": [], "fp32_checks": {}}
    result.update(hardware=hardware.describe(), command=" ".join([Path(sys.executable).name, *sys.argv]))
    result["threads"] = torch.get_num_threads()
    result["omp_num_threads"] = os.environ.get("OMP_NUM_THREADS")

    def save() -> None:
        atomic_write_text(out_path, json.dumps(result, indent=2) + "\n")

    for name in a.model or list(PLANS):
        plan = PLANS[name]
        dataset, methods, draft_name, max_new, counts = plan
        if name not in result["fp32_checks"]:
            result["fp32_checks"][name] = fp32_check(name, plan, a.check_prompts, a.check_tokens)
            save()
        checks = result["fp32_checks"][name]
        target = load_model(name, a.dtype)
        draft = load_model(draft_name, a.dtype) if draft_name else None
        decoders = {
            label: build_decoder(m, target, draft if m == "sd" else None, opts) for label, m, opts in methods
        }
        decoders[HF] = None
        cfg = GenerationConfig(max_new, tuple(target.eos_token_ids))
        for b in map(int, a.batch.split(",")):
            if any(r["model"] == name and r["batch_size"] == b for r in result["runs"]):
                log(f"{name} batch {b}: already in {out_path}, skipped")
                continue
            prompts = prompts_for(target.tokenizer, dataset, counts.get(b, b))
            t0 = time.time()
            res = run_batch_bench(target, decoders, prompts, cfg, b, progress=log)
            for method, r in res.items():
                rec = {
                    "model": name,
                    "dtype": target.dtype,
                    "batch_size": b,
                    "method": method,
                    "aggregate_tok_s": round(r["aggregate_tok_s"], 3),
                    "speedup_vs_batched_ar": round(r["speedup_vs_batched_ar"], 4),
                    "tokens_per_forward": round(r["tokens_per_forward"], 4),
                    "identical_to_ar_fp32": checks.get(method),
                    "identical_to_batched_ar": r["identical_to_batched_ar"],
                    "dataset": dataset,
                    "prompts": len(prompts),
                    "max_new_tokens": max_new,
                    "new_tokens": r["new_tokens"],
                    "wall_time_s": round(r["wall_time_s"], 3),
                    "latency_mean_s": round(r["latency_mean_s"], 3),
                    "latency_p50_s": round(r["latency_p50_s"], 3),
                    "latency_p90_s": round(r["latency_p90_s"], 3),
                    "ttft_mean_s": None if r["ttft_mean_s"] is None else round(r["ttft_mean_s"], 3),
                    "draft": draft_name if method == "sd" else None,
                    "options": next((o for lab, _, o in methods if lab == method), {}),
                    "batch": r["batch"],
                }
                result["runs"].append(rec)
            save()
            log(f"{name} batch {b} done in {time.time() - t0:.0f}s")
        del target, draft, decoders


if __name__ == "__main__":
    main()

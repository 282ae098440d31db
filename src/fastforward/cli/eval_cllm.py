"""``fastforward eval-cllm``: base vs CLLM on held-out prompts -> results/cllm_gsm8k.json."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from fastforward.cllm.evaluate import EvalConfig, evaluate_cllm
from fastforward.models.loading import DTYPES


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval-cllm", help="compare a CLLM with its base model (speed, accuracy, exactness)")
    p.add_argument("--base", default="smollm2-135m", help="the base model the CLLM was trained from")
    p.add_argument("--cllm", required=True, help="trained model directory")
    p.add_argument("--dataset", default="gsm8k", help="gsm8k, humaneval, mtbench or sharegpt")
    p.add_argument("--data-path", default=None, help="user JSONL instead of --dataset")
    p.add_argument("--split", default="heldout", help="gsm8k split: heldout, train, all")
    p.add_argument("--limit", type=int, default=5, help="prompts timed")
    p.add_argument("--block-size", type=int, default=16, help="Jacobi block size")
    p.add_argument("--max-new-tokens", type=int, default=256, help="most new tokens per answer")
    p.add_argument("--dtype", default="bfloat16", choices=list(DTYPES), help="dtype of the timed runs")
    p.add_argument("--exact-limit", type=int, default=None, help="prompts for the fp32 exactness check")
    p.add_argument(
        "--quality-limit",
        type=int,
        default=0,
        help="prompts for a batched fp32 accuracy/repetition run (0 = off)",
    )
    p.add_argument("--quality-batch-size", type=int, default=16, help="prompts per batch of the quality run")
    p.add_argument("--warmup", type=int, default=1, help="warm-up generations per method (excluded)")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--out", default="results/cllm_gsm8k.json", help="result JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    cfg = EvalConfig(
        base=args.base,
        cllm=args.cllm,
        dataset=args.dataset,
        split=args.split,
        limit=args.limit,
        block_size=args.block_size,
        max_new_tokens=args.max_new_tokens,
        speed_dtype=args.dtype,
        exact_limit=args.exact_limit,
        quality_limit=args.quality_limit,
        quality_batch_size=args.quality_batch_size,
        warmup=args.warmup,
        data_path=args.data_path,
        device=args.device,
    )
    result = evaluate_cllm(cfg, command=["fastforward", *sys.argv[1:]])
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    for name in ("base", "cllm"):
        r = result[name]
        print(
            f"{name:5s} tokens/forward {r['mean_accepted_tokens']:.3f}  speedup {r['speedup_vs_ar'] or 0:.2f}x  "
            f"accuracy {r['accuracy']} ({r['accuracy_prompts']} prompts)  repetition {r['repetition_rate']:.2f}  ppl {r['perplexity_on_teacher_answers']}"
            f"  fp32 exact {r['fp32_jacobi_equals_ar']}",
            file=sys.stderr,
        )
    print(
        json.dumps({k: result[k] for k in ("train_tokens", "accuracy_delta_cllm_minus_base", "wall_time_s")})
    )
    return 0

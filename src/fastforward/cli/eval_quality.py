"""``fastforward eval-quality``: greedy-answer quality of one or more models on the same prompts."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from fastforward.eval.quality import QualityConfig, evaluate_quality
from fastforward.models.loading import DTYPES


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "eval-quality",
        help="accuracy, repetition and length of greedy answers (batched; the first model is the reference)",
    )
    p.add_argument("--model", action="append", required=True, help="registry name or model dir; repeatable")
    p.add_argument("--dataset", default="gsm8k", help="gsm8k, humaneval, mtbench or sharegpt")
    p.add_argument("--data-path", default=None, help="user JSONL instead of --dataset")
    p.add_argument("--split", default="heldout", help="gsm8k split: heldout, train, all")
    p.add_argument("--limit", type=int, default=None, help="prompts (default: the whole split)")
    p.add_argument("--max-new-tokens", type=int, default=256, help="most new tokens per answer")
    p.add_argument(
        "--dtype", default="float32", choices=list(DTYPES), help="model dtype (float32: exact greedy)"
    )
    p.add_argument("--batch-size", type=int, default=16, help="prompts per batch")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--out", default="results/quality.json", help="result JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    cfg = QualityConfig(
        models=tuple(args.model),
        dataset=args.dataset,
        split=args.split,
        limit=args.limit,
        max_new_tokens=args.max_new_tokens,
        dtype=args.dtype,
        batch_size=args.batch_size,
        device=args.device,
        data_path=args.data_path,
    )
    result = evaluate_quality(cfg, command=["fastforward", *sys.argv[1:]])
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    for ref, m in result["models"].items():
        d = result["paired_vs_first"].get(ref)
        delta = f"  vs first {d['b_minus_a']:+.4f} +- {d['stderr']:.4f}" if d else ""
        print(
            f"{ref}: accuracy {m['correct']}/{m['n']} = {m['accuracy']}  repetition {m['repetition_rate']:.3f}"
            f"  mean tokens {m['mean_new_tokens']:.1f}  truncated {m['truncated_rate']:.3f}{delta}"
        )
    return 0

"""``fastforward cllm-curve``: Jacobi tokens per forward of base, snapshots and final CLLM -> JSON + PNG."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from fastforward.cllm.curve import CurvePoint, as_json, curve_models, measure
from fastforward.data import load_dataset
from fastforward.hardware import describe
from fastforward.models.loading import DTYPES
from fastforward.trace import plot_learning_curve


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cllm-curve", help="CLLM learning curve: Jacobi tokens/forward vs training tokens")
    p.add_argument("--base", default="smollm2-135m", help="the model training started from (the 0 point)")
    p.add_argument("--run", required=True, help="train-cllm --out directory (with --snapshot-every)")
    p.add_argument("--dataset", default="gsm8k", help="gsm8k, humaneval, mtbench or sharegpt")
    p.add_argument("--data-path", default=None, help="user JSONL instead of --dataset")
    p.add_argument("--split", default="heldout", help="gsm8k split: heldout, train, all")
    p.add_argument("--limit", type=int, default=8, help="prompts per point")
    p.add_argument("--block-size", type=int, default=16, help="Jacobi block size")
    p.add_argument("--max-new-tokens", type=int, default=128, help="most new tokens per answer")
    p.add_argument("--dtype", default="bfloat16", choices=list(DTYPES), help="model dtype")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    p.add_argument("--out", default="results/cllm_curve.json", help="result JSON")
    p.add_argument("--plot", default=None, help="PNG path for the chart (default: next to --out)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    models = [("base", Path(args.base), 0, 0), *curve_models(args.run)]
    samples = load_dataset(args.dataset, args.limit, split=args.split, data_path=args.data_path)
    messages = [[{"role": "user", "content": s.turns[0]}] for s in samples]
    points: list[CurvePoint] = []
    for label, path, step, tokens in models:
        m = measure(path, messages, args.block_size, args.max_new_tokens, args.dtype, args.device)
        points.append(CurvePoint(label, step, tokens, **m))
        print(
            f"cllm-curve: {label:>10s} step {step:5d} tokens {tokens:8d} tokens/forward "
            f"{m['mean_accepted_tokens']:.3f} repetition {m['repetition_rate']:.2f}",
            file=sys.stderr,
            flush=True,
        )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    extra = {
        "base": args.base,
        "run": args.run,
        "dataset": args.dataset,
        "split": args.split,
        "block_size": args.block_size,
        "max_new_tokens": args.max_new_tokens,
        "dtype": args.dtype,
        "hardware": describe(),
        "command": shlex.join(["fastforward", *sys.argv[1:]]),
    }
    out.write_text(json.dumps(as_json(points, extra), indent=2) + "\n")
    png = plot_learning_curve(
        points, args.plot or out.with_suffix(".png"), f"CLLM on {args.dataset} {args.split}: {args.base}"
    )
    print(f"cllm-curve: {out}, {png}", file=sys.stderr)
    return 0

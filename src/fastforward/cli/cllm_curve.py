"""``fastforward cllm-curve``: Jacobi tokens per forward of base, snapshots and final CLLM -> JSON + PNG.

Several ``--run LABEL=DIR`` (e.g. a CLLM and a Jacobi Forcing run on the same data) share the base point and
one chart; the JSON then has ``series`` (label -> points) beside ``points`` (the first run's)."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from fastforward.cllm.curve import CurvePoint, as_json, curve_models, measure
from fastforward.data import load_dataset
from fastforward.errors import FastForwardError
from fastforward.hardware import describe, provenance
from fastforward.models.loading import DTYPES
from fastforward.trace import plot_learning_curves


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cllm-curve", help="CLLM learning curve: Jacobi tokens/forward vs training tokens")
    p.add_argument("--base", default="smollm2-135m", help="the model training started from (the 0 point)")
    p.add_argument(
        "--run", required=True, action="append", metavar="[LABEL=]DIR",
        help="train-cllm --out directory (with --snapshot-every); repeat with LABEL=DIR to compare runs",
    )  # fmt: skip
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


def parse_runs(items: list[str]) -> list[tuple[str, str]]:
    """``DIR`` or ``LABEL=DIR`` -> (label, dir); an unlabelled run is named by its directory."""
    out: list[tuple[str, str]] = []
    for item in items:
        label, sep, path = item.partition("=")
        label, path = (label, path) if sep else (Path(item).name, item)
        if not label or not path or label in {lbl for lbl, _ in out}:
            raise FastForwardError(f"--run must be DIR or LABEL=DIR with distinct labels, got '{item}'")
        out.append((label, path))
    return out


def run(args: argparse.Namespace) -> int:
    runs = [(label, curve_models(path)) for label, path in parse_runs(args.run)]
    samples = load_dataset(args.dataset, args.limit, split=args.split, data_path=args.data_path)
    messages = [[{"role": "user", "content": s.turns[0]}] for s in samples]

    def point(label: str, path, step: int, tokens: int) -> CurvePoint:
        m = measure(path, messages, args.block_size, args.max_new_tokens, args.dtype, args.device)
        print(
            f"cllm-curve: {label:>10s} step {step:5d} tokens {tokens:8d} tokens/forward "
            f"{m['mean_accepted_tokens']:.3f} repetition {m['repetition_rate']:.2f}",
            file=sys.stderr,
            flush=True,
        )
        return CurvePoint(label, step, tokens, **m)

    base = point("base", Path(args.base), 0, 0)
    series = {name: [base] + [point(*m) for m in models] for name, models in runs}
    points = next(iter(series.values()))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    extra = {
        "base": args.base,
        "run": args.run[0] if len(args.run) == 1 else args.run,
        "dataset": args.dataset,
        "split": args.split,
        "block_size": args.block_size,
        "max_new_tokens": args.max_new_tokens,
        "dtype": args.dtype,
        "hardware": describe(),
        **provenance(),
        "command": shlex.join(["fastforward", *sys.argv[1:]]),
    }
    doc = as_json(points, extra)
    if len(series) > 1:
        doc["series"] = {name: as_json(pts, {})["points"] for name, pts in series.items()}
    out.write_text(json.dumps(doc, indent=2) + "\n")
    title = f"Jacobi tokens/forward on {args.dataset} {args.split}: {args.base}"
    png = plot_learning_curves(
        series if len(series) > 1 else {"": points}, args.plot or out.with_suffix(".png"), title
    )
    print(f"cllm-curve: {out}, {png}", file=sys.stderr)
    return 0

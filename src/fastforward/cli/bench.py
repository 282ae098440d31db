"""``fastforward bench``: methods side by side on the same prompts; JSON plus a markdown table."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from fastforward.bench.report import markdown_table
from fastforward.bench.runner import run_bench
from fastforward.cli.common import add_generation_args, add_model_args, generation_config, load_models
from fastforward.data import load_dataset
from fastforward.decoders.registry import build_decoders, parse_options
from fastforward.errors import FastForwardError
from fastforward.log import log


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="benchmark methods side by side")
    add_model_args(p)
    add_generation_args(p)
    p.add_argument("--dataset", default="mtbench", help="gsm8k, humaneval, mtbench, sharegpt (comma list ok)")
    p.add_argument("--split", default="heldout", help="gsm8k split: heldout (default), train, all")
    p.add_argument("--data-path", default=None, help="user JSONL instead of --dataset")
    p.add_argument("--limit", type=int, default=10, help="samples per dataset")
    p.add_argument(
        "--methods",
        default="ar,hf_generate",
        help="comma list, or 'all' (every lossless method); name:tag runs a method again under its own options",
    )
    p.add_argument("--warmup", type=int, default=1, help="warm-up rounds per method (excluded)")
    p.add_argument("--out", default=None, help="write JSON here (and a .md table beside it)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    samples = []
    names = [args.data_path] if args.data_path else [d.strip() for d in args.dataset.split(",")]
    for d in names:
        samples += load_dataset(d, args.limit, args.split, args.data_path)
    if not samples:
        raise FastForwardError("no samples to benchmark")
    target, draft = load_models(args)
    decoders = build_decoders(args.methods, target, draft, parse_options(args.opt))
    methods = list(decoders)
    config = generation_config(args, target)
    log(
        f"bench {target.name} {args.dtype}: {len(samples)} samples x {len(methods)} methods ({', '.join(methods)})"
    )
    resolved = {k: v for k, v in vars(args).items() if k != "func"}
    result = run_bench(target, decoders, samples, config, ",".join(names), args.warmup, resolved)
    if draft is not None:
        result["draft"] = draft.name
    table = markdown_table(result)
    print(table)
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2) + "\n")
        out.with_suffix(".md").write_text(table + "\n")
        log(f"wrote {out} and {out.with_suffix('.md')}")
    print(json.dumps({n: round(m["speedup_vs_ar"], 3) for n, m in result["methods"].items()}))
    return 0

"""``fastforward cpu-speed``: cost curves + methods side by side on one model (issue 13's study)."""

from __future__ import annotations

import argparse
from pathlib import Path

from fastforward.bench.cpu_speed import run_cpu_speed
from fastforward.cli.validate import warn_if_busy
from fastforward.core.options import parse_options
from fastforward.errors import FastForwardError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "cpu-speed",
        help="cost curves per dtype/path, then methods on the cheapest verify configuration vs the fastest AR",
    )
    p.add_argument(
        "--model", default="qwen2.5-coder-1.5b", help="registry name, HF model directory, or .gguf file"
    )
    p.add_argument("--datasets", default="gsm8k,humaneval,mtbench", help="comma list of datasets")
    p.add_argument(
        "--methods",
        default="ar,hf_generate,hf_pld,hf_assisted,pld,lookahead,jacobi,sd,qsd,sd-cross",
        help="comma list (see fastforward methods)",
    )
    p.add_argument(
        "--draft",
        default="qwen2.5-coder-0.5b",
        help="draft model of the same tokenizer (sd, hf_assisted, ...), loaded in the fastest-AR "
        "configuration ('' for none)",
    )
    p.add_argument(
        "--cross-draft",
        default="smollm2-135m",
        help="draft model of another tokenizer for sd-cross ('' for none)",
    )
    p.add_argument("--limit", type=int, default=20, help="samples per dataset")
    p.add_argument("--max-new-tokens", type=int, default=128, help="most new tokens per answer")
    p.add_argument(
        "--verify-k", type=int, default=8, help="block size the parallel configuration is chosen for"
    )
    p.add_argument(
        "--exact-samples",
        type=int,
        default=10,
        help="prompts per dataset of the fp32 exactness check (identical_to_ar_fp32; 0 = skip)",
    )
    p.add_argument("--exact-tokens", type=int, default=32, help="new tokens per prompt of the fp32 check")
    p.add_argument(
        "--opt", action="append", default=[], metavar="KEY=VALUE", help="method option, repeatable"
    )
    p.add_argument("--out", type=Path, default=Path("results/cpu_speed.json"), help="result JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if min(args.limit, args.max_new_tokens, args.verify_k, args.exact_tokens) < 1 or args.exact_samples < 0:
        raise FastForwardError(
            "--limit, --max-new-tokens, --verify-k and --exact-tokens must be positive, --exact-samples >= 0"
        )
    datasets = [d.strip() for d in args.datasets.split(",") if d.strip()]
    warn_if_busy()
    run_cpu_speed(
        args.model, datasets, args.methods, args.limit, args.max_new_tokens, args.out,
        parse_options(args.opt), args.verify_k, draft=args.draft or None,
        cross_draft=args.cross_draft or None, exact_samples=args.exact_samples,
        exact_tokens=args.exact_tokens,
    )  # fmt: skip
    return 0

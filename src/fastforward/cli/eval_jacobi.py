"""``fastforward eval-jacobi``: the base model and trained models (CLLM, Jacobi Forcing) side by side, each
with several Jacobi decoder variants; speed, exactness and quality in one JSON."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from fastforward.errors import FastForwardError
from fastforward.models.loading import DTYPES

DEFAULT_VARIANTS = ["plain:"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "eval-jacobi",
        help="base vs trained models (CLLM, Jacobi Forcing) with Jacobi decoder variants, side by side",
    )
    p.add_argument("--base", default="smollm2-135m", help="the base model (reference for the NLL measures)")
    p.add_argument(
        "--model", action="append", default=[], metavar="LABEL=PATH", dest="trained",
        help="a trained model to compare, e.g. cllm=runs/x/cllm (repeatable)",
    )  # fmt: skip
    p.add_argument(
        "--variant", action="append", default=None, metavar="LABEL:KEY=VALUE,...",
        help="a Jacobi decoder variant, e.g. recycle:pool_size=2 or mb:blocks=2,spawn_ratio=0.85 "
        "(repeatable; default: plain:)",
    )  # fmt: skip
    p.add_argument("--dataset", default="gsm8k", help="gsm8k, humaneval, mtbench or sharegpt")
    p.add_argument("--data-path", default=None, help="user JSONL instead of --dataset")
    p.add_argument("--split", default="heldout", help="gsm8k split: heldout, train, all")
    p.add_argument("--limit", type=int, default=20, help="prompts")
    p.add_argument("--block-size", type=int, default=16, help="Jacobi block size")
    p.add_argument("--max-new-tokens", type=int, default=128, help="most new tokens per answer")
    p.add_argument("--dtype", default="bfloat16", choices=list(DTYPES), help="dtype of the timed runs")
    p.add_argument("--exact-limit", type=int, default=10, help="prompts for the fp32 exactness check")
    p.add_argument("--warmup", type=int, default=1, help="warm-up generations per decoder (excluded)")
    p.add_argument(
        "--skip-base-variants", action="store_true",
        help="decode with the base model's AR only (its answers are the NLL reference), no Jacobi variants",
    )  # fmt: skip
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--out", default="results/jacobi_forcing.json", help="result JSON")
    p.set_defaults(func=run)


def parse_models(items: list[str]) -> tuple[tuple[str, str], ...]:
    out: list[tuple[str, str]] = []
    for item in items:
        label, sep, path = item.partition("=")
        if not sep or not label or not path:
            raise FastForwardError(f"--model must be LABEL=PATH, got '{item}'")
        if label == "base" or label in {lbl for lbl, _ in out}:
            raise FastForwardError(f"--model label '{label}' is used twice (or is 'base')")
        out.append((label, path))
    return tuple(out)


def parse_variants(items: list[str]) -> tuple[tuple[str, tuple[tuple[str, object], ...]], ...]:
    from fastforward.core.options import parse_options

    out: list[tuple[str, tuple[tuple[str, object], ...]]] = []
    for item in items:
        label, sep, rest = item.partition(":")
        if not sep or not label:
            raise FastForwardError(f"--variant must be LABEL:KEY=VALUE,... (or LABEL:), got '{item}'")
        if label in {lbl for lbl, _ in out}:
            raise FastForwardError(f"--variant label '{label}' is used twice")
        opts = parse_options([kv for kv in rest.split(",") if kv]) if rest else {}
        out.append((label, tuple(opts.items())))
    return tuple(out)


def run(args: argparse.Namespace) -> int:
    from fastforward.cllm.compare import CompareConfig, compare, nan_free
    from fastforward.core.options import build_config
    from fastforward.decoders.jacobi import ALIASES, JacobiConfig

    models = parse_models(args.trained)
    variants = parse_variants(args.variant or DEFAULT_VARIANTS)
    for label, opts in variants:  # a bad option fails now, not after an hour of decoding
        options = {"block_size": args.block_size, **dict(opts)}
        build_config(JacobiConfig, options, f"jacobi ({label})", ALIASES)
    cfg = CompareConfig(
        base=args.base,
        models=models,
        variants=variants,
        dataset=args.dataset,
        split=args.split,
        limit=args.limit,
        block_size=args.block_size,
        max_new_tokens=args.max_new_tokens,
        speed_dtype=args.dtype,
        exact_limit=args.exact_limit,
        warmup=args.warmup,
        data_path=args.data_path,
        device=args.device,
        base_variants=not args.skip_base_variants,
    )
    result = nan_free(compare(cfg, command=["fastforward", *sys.argv[1:]]))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(out.suffix + ".tmp")
    tmp.write_text(json.dumps(result, indent=2) + "\n")
    tmp.replace(out)
    for label in ("base", *(lbl for lbl, _ in models)):
        r = result[label]
        if r["best_variant"] is None:
            continue
        print(
            f"{label:>15s} tok/fwd {r['mean_accepted_tokens']:.2f} speedup {r['speedup_vs_ar'] or 0:.2f}x "
            f"({r['best_variant']}) accuracy {r['accuracy']} nll_by_base {r['nll_by_base']:.3f} "
            f"repetition {r['repetition_rate']:.2f} fp32 identical {r['identical_to_own_ar_fp32']}",
            file=sys.stderr,
        )
    return 0

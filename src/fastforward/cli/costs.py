"""``fastforward costs``: the k-token forward cost curve of a model per dtype and kernel path, and what to run.

Measured once per machine (cached under ``$FASTFORWARD_CACHE/costs``; ``--refresh`` measures again), so a
user sees before benchmarking whether multi-token forwards are cheap on their CPU, and in which dtype."""

from __future__ import annotations

import argparse
import gc
import json
from pathlib import Path

from fastforward.bench.costs import KS, cached_curve, choose
from fastforward.cli.validate import warn_if_busy
from fastforward.errors import FastForwardError
from fastforward.hardware import describe, provenance
from fastforward.log import log
from fastforward.models.kernels import PATHS, check_path
from fastforward.models.loading import DTYPES, load_model
from fastforward.models.registry import DEFAULT_MODEL


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "costs", help="measure what a forward over k new tokens costs, per dtype and kernel path"
    )
    p.add_argument("--model", default=DEFAULT_MODEL, help="registry name, HF model directory, or .gguf file")
    p.add_argument("--dtype", default="float32,bfloat16", help="comma-separated dtypes")
    p.add_argument("--path", default=",".join(PATHS), help="comma-separated kernel paths")
    p.add_argument("--k", default=",".join(map(str, KS)), help="comma-separated new-token counts")
    p.add_argument("--context", type=int, default=128, help="cached prompt length before the timed forward")
    p.add_argument("--repeats", type=int, default=5, help="timed forwards per k (median reported)")
    p.add_argument("--refresh", action="store_true", help="measure again even if a cached curve exists")
    p.add_argument("--out", type=Path, default=None, help="also write the records as JSON here")
    p.set_defaults(func=run)


def _list(text: str, allowed: tuple[str, ...] | None, what: str) -> list[str]:
    items = [x.strip() for x in text.split(",") if x.strip()]
    bad = [x for x in items if allowed is not None and x not in allowed]
    if not items or bad:
        raise FastForwardError(f"--{what}: expected a comma-separated list of {', '.join(allowed or ())}")
    return items


def run(args: argparse.Namespace) -> int:
    dtypes = _list(args.dtype, tuple(DTYPES), "dtype")
    paths = _list(args.path, PATHS, "path")
    try:
        ks = tuple(sorted({int(k) for k in _list(args.k, None, "k")}))
    except ValueError:
        raise FastForwardError("--k: expected comma-separated positive integers") from None
    if ks[0] < 1 or args.context < 1 or args.repeats < 1:
        raise FastForwardError("--k, --context and --repeats must be positive")
    warn_if_busy()
    records: list[dict] = []
    for dtype in dtypes:
        for path in paths:
            try:
                check_path(path, DTYPES[dtype])
            except FastForwardError as e:
                log(f"skipping {dtype}/{path}: {e}")
                continue
            loaded = load_model(args.model, dtype, path=path)
            log(f"measuring {loaded.name} {dtype}/{path} at k={','.join(map(str, ks))}")
            curve = cached_curve(loaded, args.refresh, ks=ks, context=args.context, repeats=args.repeats)
            records += curve
            print(
                f"{dtype:9s} {path:10s} "
                + "  ".join(f"k={r['k']}: {r['ms']:.1f} ms ({r['relative_to_k1']:.2f}x)" for r in curve)
            )
            del loaded
            gc.collect()
    if not records:
        raise FastForwardError("no dtype/path combination can run on this machine")
    print(f"AR / drafting: {choose(records, 1).why}")
    k_verify = min(8, max(r["k"] for r in records))
    print(f"verify forwards: {choose(records, k_verify).why}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(
            json.dumps({"hardware": describe(), **provenance(), "cost_curves": records}, indent=1)
        )
    return 0

"""``fastforward chimera-report``: head accuracy per variant + per-dataset bench figures in one JSON."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from fastforward.bench.chimera_report import summarize


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("chimera-report", help="summarise a Chimera run (head accuracy + benches) in one JSON")
    p.add_argument("--heads", nargs="+", default=[], help="train-chimera --report files, one per variant")
    p.add_argument("--bench", nargs="+", default=[], help="bench JSONs with ar and chimera entries")
    p.add_argument("--out", required=True, help="summary JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    report = summarize(args.heads, args.bench)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    for variant, h in report["heads"].items():
        print(variant, "top-1 per head:", [row[0] for row in h["head_topk"]])
    for dtype, b in report["bench"].items():
        for label, m in b["methods"].items():
            print(
                dtype, label, {k: m[k] for k in ("mean_accepted_tokens", "identical_to_ar", "speedup_vs_ar")}
            )
    return 0

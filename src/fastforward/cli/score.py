"""``fastforward score RESULT.json``: add GSM8K accuracy / HumanEval pass@1 per method to a bench JSON."""

from __future__ import annotations

import argparse
import json

from fastforward.eval.score import score_file


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("score", help="score bench outputs (GSM8K accuracy, HumanEval pass@1), in place")
    p.add_argument("result", help="a JSON written by 'fastforward bench --out'")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds per HumanEval program")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    quality = score_file(args.result, args.timeout)
    lines = ["| method | dataset | correct / n | score | relative to ar |", "|---|---|---|---|---|"]
    for name, q in quality.items():
        for ds, v in q.items():
            score = v.get("accuracy", v.get("pass_at_1"))
            rel = "-" if v["relative_to_ar"] is None else f"{v['relative_to_ar']:.3f}"
            lines.append(f"| {name} | {ds} | {v['correct']} / {v['n']} | {score:.3f} | {rel} |")
    print("\n".join(lines))
    print(
        json.dumps(
            {n: {d: v.get("accuracy", v.get("pass_at_1")) for d, v in q.items()} for n, q in quality.items()}
        )
    )
    return 0

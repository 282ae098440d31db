"""``fastforward score RESULT.json``: add GSM8K accuracy / HumanEval pass@1 per method to a bench JSON.

It first says what it can score in each dataset of the file (MT-bench and ShareGPT answers are open-ended and
have no automatic score), so a result without GSM8K or HumanEval samples gets an explanation, not an empty
table."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from fastforward.errors import FastForwardError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("score", help="score bench outputs (GSM8K accuracy, HumanEval pass@1), in place")
    p.add_argument("result", help="a JSON written by 'fastforward bench --out'")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds per HumanEval program")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from fastforward.eval.score import explain, score_file

    path = Path(args.result)
    if not path.is_file():
        raise FastForwardError(
            f"bench result not found: {path} (expected a JSON written by fastforward bench --out)"
        )
    quality = score_file(path, args.timeout)
    result = json.loads(path.read_text(encoding="utf-8"))
    for ds, what in explain(result).items():
        print(f"{ds}: {what}")
    if not any(quality.values()):
        print(f"nothing to score in {path}: it holds no GSM8K or HumanEval samples (file left unchanged)")
        return 0
    lines = ["", "| method | dataset | correct / n | score | relative to ar |", "|---|---|---|---|---|"]
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

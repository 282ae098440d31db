"""``fastforward report RESULT.json ...``: print the markdown table of saved benchmark results."""

from __future__ import annotations

import argparse
import json

from fastforward.bench.report import markdown_table
from fastforward.errors import FastForwardError, read_user_text


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="markdown tables from saved bench JSON files")
    p.add_argument("files", nargs="+", help="JSON files written by fastforward bench --out")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    for f in args.files:
        try:
            data = json.loads(read_user_text(f, "result file"))
            table = markdown_table(data)
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as e:
            raise FastForwardError(
                f"{f} is not a fastforward bench result ({type(e).__name__}: {e})"
            ) from None
        print(table)
        print()
    return 0

"""``fastforward methods [NAME ...]``: every decoding method, what it does, whether it is lossless, what it
needs, and its options with defaults and meaning (the facts of :mod:`fastforward.decoders.registry`)."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from fastforward.decoders.registry import METHODS, method_options
from fastforward.errors import FastForwardError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("methods", help="list the decoding methods and their options")
    p.add_argument("names", nargs="*", metavar="NAME", help="only these methods (default: all)")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.set_defaults(func=run)


def describe(name: str) -> dict:
    """One method as data: the text listing and ``--json`` both come from here."""
    spec = METHODS[name]
    return {
        "name": name,
        "summary": spec.summary,
        "lossless": spec.lossless,
        "needs": spec.needs or "nothing besides the model",
        "in_all": spec.in_all,
        "decoding": spec.decoding,
        "options": [asdict(d) for d in method_options(name)],
    }


def run(args: argparse.Namespace) -> int:
    unknown = [n for n in args.names if n not in METHODS]
    if unknown:
        raise FastForwardError(f"unknown method '{unknown[0]}'; known: {', '.join(METHODS)}")
    items = [describe(n) for n in (args.names or METHODS)]
    if args.json:
        print(json.dumps(items, indent=1))
        return 0
    for m in items:
        print(f"{m['name']}: {m['summary']}")
        in_all = "yes" if m["in_all"] else "no (name it in --methods)"
        print(
            f"    lossless: {m['lossless']}; needs: {m['needs']}; {m['decoding']}; in --methods all: {in_all}"
        )
        if not m["options"]:
            print("    options: none")
        for o in m["options"]:
            key = o["name"] + (f" ({o['alias']})" if o["alias"] else "")
            print(f"    --opt {key:18s} {o['help']} [default: {o['default']}]")
        print()
    print(
        "Lossless methods give the same tokens as greedy AR, tested token for token in float32. An unscoped "
        "--opt key=value goes to every method of a bench that reads the key; LABEL.key=value to one."
    )
    return 0

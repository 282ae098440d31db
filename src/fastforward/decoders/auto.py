"""``auto``: measure the lossless methods briefly on the loaded model, then run the fastest.

Which method pays depends on the machine (a k-token forward costs ~1.1x one token on a CPU with native bf16,
2-3x on an AVX2-only one with the default GEMM), on the model (overhead-bound 135M vs memory-bound 1.5B) and
on what drafts exist. Rather than predict it, ``auto`` times each candidate on a few built-in prompts (a
coding task, a word problem, a chat question: the kinds of text where copying, parallel guessing and drafting
differ most), greedy, ``tokens`` new tokens each after one untimed warm-up, picks the highest tokens/s, and
prints what it measured and why it chose. The choice is cached per (model, dtype, kernel path, ISA, torch,
threads, candidates, draft) under ``$FASTFORWARD_CACHE/auto`` so later runs on the same machine start at
once; ``refresh=true`` measures again.

Every candidate is lossless, so ``auto`` is too: it only picks which exact method produces the tokens.
Candidates that cannot be built here (qsd where torch lacks the int4 CPU kernel, sd without ``--draft``)
are skipped with a line saying why.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import dataclass
from typing import Any

import torch

from fastforward.core.decoder import Decoder, GenerationConfig, Run
from fastforward.core.options import build_config, opt
from fastforward.data.base import render_prompt
from fastforward.errors import FastForwardError
from fastforward.log import log

# Candidates when none are given: the training-free lossless methods; sd joins when a draft is loaded.
DEFAULT_CANDIDATES = ("ar", "pld", "lookahead", "jacobi", "qsd")
DRAFT_CANDIDATES = ("sd",)
# Cheap drafts, from the costs measured on a 2-core AVX-512 CPU (docs/results.md, issue 13): the target's
# int4 copy (int8 costs ~0.75 of a bf16 prepacked 1.5B target per token, int4 0.40) and the draft model's
# int4 copy (Qwen2.5-Coder-0.5B: bf16 0.31-0.36 of the target, int4 0.19; GSM8K 1.43x -> 1.75x).
CANDIDATE_OPTIONS: dict[str, dict[str, Any]] = {"qsd": {"bits": 4}, "sd": {"draft_bits": 4}}

CALIBRATION_PROMPTS = (
    "Write a Python function that returns the n-th Fibonacci number iteratively, with a docstring.",
    "A shop sells pencils at 3 for $1. Tom buys 12 pencils and pays with a $10 bill. How much change does "
    "he get? Explain step by step.",
    "Give three tips for writing clear technical documentation.",
)


@dataclass(frozen=True)
class AutoOptions:
    candidates: str = opt(
        "",
        help="comma list of lossless methods to time (default: ar, pld, lookahead, jacobi, qsd int4, and sd when --draft is given)",
    )
    tokens: int = opt(32, min=4, help="new tokens per calibration prompt")
    refresh: bool = opt(False, help="time the candidates again even if this machine has a cached choice")


def candidate_names(options: AutoOptions, has_draft: bool) -> list[str]:
    """The methods ``auto`` times: the given list, or the defaults (with sd when a draft is loaded).
    AR is always among them, so ``auto`` never picks something slower than the baseline it measured."""
    if options.candidates:
        names = [n.strip() for n in options.candidates.split(",") if n.strip()]
    else:
        names = list(DEFAULT_CANDIDATES) + (list(DRAFT_CANDIDATES) if has_draft else [])
    if "auto" in names:
        raise FastForwardError("auto: 'auto' cannot be its own candidate")
    return ["ar", *[n for n in names if n != "ar"]]


def pick(measured: dict[str, float]) -> tuple[str, str]:
    """(fastest method, why) from tokens/s per method; ties go to the earlier (simpler) candidate."""
    if not measured:
        raise FastForwardError("auto: no candidate method could be built")
    best = max(measured, key=lambda n: (measured[n], -list(measured).index(n)))
    ar = measured.get("ar")
    parts = ", ".join(f"{n} {v:.1f}" for n, v in measured.items())
    rel = f" = {measured[best] / ar:.2f}x AR" if ar else ""
    return best, f"tokens/s {parts}: {best}{rel}"


def _cache_key(target: Any, draft: Any, names: list[str], tokens: int) -> str:
    from fastforward.hardware import cpu_isa
    from fastforward.models.kernels import path_of

    parts = [
        target.name, target.dtype, path_of(target.model), cpu_isa(), torch.__version__,
        f"{torch.get_num_threads()}t", ",".join(names), f"tok{tokens}", draft.name if draft else "nodraft",
    ]  # fmt: skip
    readable = re.sub(r"[^A-Za-z0-9.+_-]+", "_", "-".join(parts[:4]))
    return f"{readable}-{hashlib.sha1('|'.join(parts).encode()).hexdigest()[:12]}"


def calibrate(
    decoders: dict[str, Decoder], tokenizer: Any, tokens: int, eos: tuple[int, ...]
) -> dict[str, float]:
    """Greedy tokens/s of each decoder over the calibration prompts (one untimed warm-up each)."""
    config = GenerationConfig(max_new_tokens=tokens, eos_token_ids=eos)
    warm = GenerationConfig(max_new_tokens=min(8, tokens), eos_token_ids=eos)
    if tokenizer is None:
        raise FastForwardError("method 'auto' times the methods on text prompts: this model has no tokenizer")
    prompts = [render_prompt(tokenizer, [{"role": "user", "content": p}]) for p in CALIBRATION_PROMPTS]
    out: dict[str, float] = {}
    for name, dec in decoders.items():
        dec.generate(prompts[0], warm)
        n, t = 0, 0.0
        for ids in prompts:
            start = time.perf_counter()
            n += len(dec.generate(ids, config).tokens)
            t += time.perf_counter() - start
        out[name] = n / t if t else 0.0
    return out


class AutoDecoder(Decoder):
    """Runs the method chosen by calibration; its stats say which (``extras['auto_choice']``)."""

    name = "auto"
    in_all = False  # a meta-method: `all` already runs every candidate itself

    def __init__(self, chosen: Decoder, choice: str, why: str) -> None:
        super().__init__(chosen.model, chosen.context_length)
        self.chosen, self.choice, self.why = chosen, choice, why
        self.lossless = chosen.lossless  # always true: every candidate is checked lossless
        self.unconstrained_why = chosen.unconstrained_why  # a constraint / logprobs: as the chosen method

    def reopen_estimates(self) -> None:
        self.chosen.reopen_estimates()

    def proposer(self, solo: bool) -> Any:
        """A batch of auto's rows runs the chosen method's proposer."""
        return self.chosen.proposer(solo)

    def _generate(self, prompt_ids: torch.Tensor, run: Run) -> None:
        run.stats.extras["auto_choice"] = self.choice
        self.chosen._generate(prompt_ids, run)


def build(name: str, target: Any, draft: Any, options: dict) -> AutoDecoder:
    from fastforward.decoders.registry import METHODS, build_decoder
    from fastforward.models.loading import cache_root

    o = build_config(AutoOptions, options, name)
    names = candidate_names(o, draft is not None)
    for n in names:
        if n not in METHODS:
            raise FastForwardError(f"auto: unknown candidate '{n}'; known: {', '.join(METHODS)}")
    cache = cache_root() / "auto" / (_cache_key(target, draft, names, o.tokens) + ".json")
    if cache.exists() and not o.refresh:
        saved = json.loads(cache.read_text())
        choice = saved["choice"]
        why = f"cached {cache}: {saved['why']}"
        log(f"auto: {choice} ({why}; refresh=true to measure again)")
        return AutoDecoder(
            build_decoder(choice, target, draft, CANDIDATE_OPTIONS.get(choice, {})), choice, why
        )

    decoders: dict[str, Decoder] = {}
    for n in names:
        try:
            dec = build_decoder(n, target, draft, CANDIDATE_OPTIONS.get(n, {}))
        except FastForwardError as e:  # e.g. sd without a draft, a kernel this torch lacks
            log(f"auto: skipping {n}: {e}")
            continue
        if not dec.lossless:
            raise FastForwardError(
                f"auto: candidate '{n}' is lossy; auto only chooses among lossless methods"
            )
        decoders[n] = dec
    log(f"auto: timing {', '.join(decoders)} on {len(CALIBRATION_PROMPTS)} prompts x {o.tokens} tokens")
    measured = calibrate(decoders, target.tokenizer, o.tokens, tuple(target.eos_token_ids))
    choice, why = pick(measured)
    log(f"auto: chose {choice} ({why})")
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps({"choice": choice, "why": why, "measured": measured}) + "\n")
    return AutoDecoder(decoders[choice], choice, why)


OPTIONS = AutoOptions

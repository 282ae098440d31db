"""Method names used by ``bench`` and ``generate`` -> the module that builds the decoder.

Each module exposes ``build(target, draft, options) -> Decoder``. Modules are imported lazily, so a method
whose module (or optional dependency) is absent is simply unavailable rather than breaking the CLI.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from fastforward.core.decoder import Decoder
from fastforward.errors import FastForwardError
from fastforward.models.loading import LoadedModel


@dataclass(frozen=True)
class MethodSpec:
    name: str
    module: str  # fastforward.decoders.<module>
    summary: str
    needs_draft: bool = False
    lossless: bool = True  # lossy methods are opt-in: never part of "all" unless asked for by name


METHODS: dict[str, MethodSpec] = {
    m.name: m
    for m in [
        MethodSpec("ar", "ar", "autoregressive baseline (greedy or sampling)"),
        MethodSpec("hf_generate", "hf_generate", "transformers generate(), the peer baseline"),
        MethodSpec(
            "hf_assisted", "hf_generate", "transformers assisted generation with --draft", needs_draft=True
        ),
        MethodSpec("jacobi", "jacobi", "Jacobi decoding with KV cache (CLLM inference)"),
        MethodSpec("lookahead", "lookahead", "lookahead decoding: Jacobi window + n-gram pool verification"),
        MethodSpec(
            "sd",
            "speculative",
            "speculative decoding, draft model, exact greedy verification",
            needs_draft=True,
        ),
        MethodSpec(
            "sd-sample",
            "speculative",
            "speculative decoding with lossless rejection sampling",
            needs_draft=True,
        ),
        MethodSpec("pld", "speculative", "prompt lookup (n-gram) drafting, exact greedy verification"),
        MethodSpec("layerskip", "speculative", "self-speculative: the target's first k layers draft"),
        MethodSpec(
            "typical",
            "speculative",
            "draft model + typical acceptance (LOSSY)",
            needs_draft=True,
            lossless=False,
        ),
        MethodSpec(
            "consultant",
            "speculative",
            "Consultant Decoding, EMA-NLL acceptance (LOSSY)",
            needs_draft=True,
            lossless=False,
        ),
        MethodSpec("chimera", "chimera", "Chimera draft heads + tree verification (needs --opt heads=PATH)"),
    ]
}


def _module(spec: MethodSpec) -> Any:
    return importlib.import_module(f"fastforward.decoders.{spec.module}")


def available(spec: MethodSpec) -> bool:
    try:
        _module(spec)
    except ModuleNotFoundError:
        return False
    return True


def resolve_methods(text: str, have_draft: bool) -> list[str]:
    """Parse ``--methods a,b,c`` or ``all`` (every available lossless method that can run with these models)."""
    if text == "all":
        return [
            n
            for n, s in METHODS.items()
            if s.lossless
            and available(s)
            and (have_draft or not s.needs_draft)
            and n not in ("chimera", "sd-sample")
        ]
    names = [n.strip() for n in text.split(",") if n.strip()]
    for n in names:
        if n not in METHODS:
            raise FastForwardError(f"unknown method '{n}'; known: {', '.join(METHODS)}")
        if not available(METHODS[n]):
            raise FastForwardError(f"method '{n}' is not available in this build")
        if METHODS[n].needs_draft and not have_draft:
            raise FastForwardError(f"method '{n}' needs a draft model: pass --draft NAME")
    return names


def build_decoder(
    name: str, target: LoadedModel, draft: LoadedModel | None = None, options: dict[str, Any] | None = None
) -> Decoder:
    spec = METHODS.get(name)
    if spec is None:
        raise FastForwardError(f"unknown method '{name}'; known: {', '.join(METHODS)}")
    if spec.needs_draft and draft is None:
        raise FastForwardError(f"method '{name}' needs a draft model: pass --draft NAME")
    return _module(spec).build(name, target, draft, dict(options or {}))


def parse_options(pairs: list[str] | None) -> dict[str, Any]:
    """``["block_size=16", "eps=2.0", "init=random"]`` -> typed dict."""
    out: dict[str, Any] = {}
    for p in pairs or []:
        if "=" not in p:
            raise FastForwardError(f"--opt expects key=value, got '{p}'")
        k, v = p.split("=", 1)
        val: Any = v
        for cast in (int, float):
            try:
                val = cast(v)
                break
            except ValueError:
                continue
        if v.lower() in ("true", "false"):
            val = v.lower() == "true"
        out[k.strip()] = val
    return out

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


def base_method(label: str) -> str:
    """``chimera:medusa`` -> ``chimera``: a label is a method name plus an optional ``:tag``, so one bench run
    can hold the same method twice with different options (e.g. a draft and its ablations)."""
    return label.split(":", 1)[0]


def resolve_methods(text: str, have_draft: bool) -> list[str]:
    """Parse ``--methods a,b,c:tag`` or ``all`` (every available lossless method that can run with these models).

    Returns labels (a method name, or ``name:tag`` for a second configuration of the same method)."""
    if text == "all":
        return [
            n
            for n, s in METHODS.items()
            if s.lossless
            and available(s)
            and (have_draft or not s.needs_draft)
            and n not in ("chimera", "sd-sample")
        ]
    labels = [n.strip() for n in text.split(",") if n.strip()]
    if len(set(labels)) != len(labels):
        raise FastForwardError(f"--methods lists a method twice: {text} (tag the second one, e.g. chimera:b)")
    for label in labels:
        n = base_method(label)
        if n not in METHODS:
            raise FastForwardError(f"unknown method '{n}'; known: {', '.join(METHODS)}")
        if not available(METHODS[n]):
            raise FastForwardError(f"method '{n}' is not available in this build")
        if METHODS[n].needs_draft and not have_draft:
            raise FastForwardError(f"method '{n}' needs a draft model: pass --draft NAME")
    return labels


def build_decoder(
    name: str, target: LoadedModel, draft: LoadedModel | None = None, options: dict[str, Any] | None = None
) -> Decoder:
    spec = METHODS.get(base_method(name))
    if spec is None:
        raise FastForwardError(f"unknown method '{name}'; known: {', '.join(METHODS)}")
    if spec.needs_draft and draft is None:
        raise FastForwardError(f"method '{name}' needs a draft model: pass --draft NAME")
    return _module(spec).build(spec.name, target, draft, dict(options or {}))


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


def options_for(label: str, options: dict[str, Any], labels: list[str]) -> dict[str, Any]:
    """The options of one bench entry: the unscoped ``key=value`` ones, overridden by ``label.key=value``.

    A scoped option whose label is not among ``labels`` is an error (a typo would silently change nothing)."""
    for key in options:
        if "." in key and key.split(".", 1)[0] not in labels:
            raise FastForwardError(
                f"--opt {key}: '{key.split('.', 1)[0]}' is not in --methods ({', '.join(labels)})"
            )
    out = {k: v for k, v in options.items() if "." not in k}
    out.update(
        {k.split(".", 1)[1]: v for k, v in options.items() if k.split(".", 1)[0] == label and "." in k}
    )
    return out

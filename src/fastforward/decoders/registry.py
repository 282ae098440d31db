"""Method names used by ``bench`` and ``generate`` -> the module that builds the decoder.

Each module exposes ``build(name, target, draft, options) -> Decoder`` and ``OPTIONS`` (its options dataclass,
plus ``ALIASES`` where short names exist). What a built decoder *is* (lossless, needs a draft, part of
``all``) is asked of the decoder instance, never stored here: a configuration can change it (Chimera with
``accept=typical`` is lossy). Modules are imported lazily, so a method whose module (or optional dependency)
is absent is simply unavailable rather than breaking the CLI.
"""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass
from typing import Any

from fastforward.core.decoder import Decoder, MissingInput
from fastforward.core.options import parse_options
from fastforward.errors import FastForwardError
from fastforward.models.loading import LoadedModel

__all__ = ["METHODS", "base_method", "build_decoder", "build_decoders", "options_for", "parse_options"]

BASELINE = "ar"


@dataclass(frozen=True)
class MethodSpec:
    name: str
    module: str  # fastforward.decoders.<module>
    summary: str


METHODS: dict[str, MethodSpec] = {
    m.name: m
    for m in [
        MethodSpec("ar", "ar", "autoregressive baseline (greedy or sampling)"),
        MethodSpec("hf_generate", "hf_generate", "transformers generate(), the peer baseline"),
        MethodSpec("hf_assisted", "hf_generate", "transformers assisted generation with --draft"),
        MethodSpec("hf_pld", "hf_generate", "transformers prompt lookup decoding, the peer of pld"),
        MethodSpec("jacobi", "jacobi", "Jacobi decoding with KV cache (CLLM inference)"),
        MethodSpec("lookahead", "lookahead", "lookahead decoding: Jacobi window + n-gram pool verification"),
        MethodSpec("sd", "speculative", "speculative decoding, draft model, exact greedy verification"),
        MethodSpec("sd-sample", "speculative", "speculative decoding with lossless rejection sampling"),
        MethodSpec("pld", "speculative", "prompt lookup (n-gram) drafting, exact greedy verification"),
        MethodSpec("layerskip", "speculative", "self-speculative: the target's first k layers draft"),
        MethodSpec("qsd", "speculative", "self-speculative: the target's own int8/int4 copy drafts"),
        MethodSpec("typical", "speculative", "draft model + typical acceptance (LOSSY)"),
        MethodSpec("consultant", "speculative", "Consultant Decoding, EMA-NLL acceptance (LOSSY)"),
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


def option_names(name: str) -> set[str]:
    """The option keys method ``name`` accepts (field names and aliases of its options dataclass)."""
    mod = _module(METHODS[name])
    return {f.name for f in dataclasses.fields(mod.OPTIONS)} | set(getattr(mod, "ALIASES", {}))


def resolve_methods(text: str) -> list[str]:
    """Parse ``--methods a,b,c:tag`` (checked: known, available, no repeats) or ``all`` (every available
    method; :func:`build_decoders` keeps those whose decoder says it belongs in ``all``)."""
    if text == "all":
        return [n for n, s in METHODS.items() if available(s)]
    labels = [n.strip() for n in text.split(",") if n.strip()]
    if not labels:
        raise FastForwardError("--methods is empty")
    if len(set(labels)) != len(labels):
        raise FastForwardError(f"--methods lists a method twice: {text} (tag the second one, e.g. chimera:b)")
    for label in labels:
        n = base_method(label)
        if n not in METHODS:
            raise FastForwardError(f"unknown method '{n}'; known: {', '.join(METHODS)}")
        if not available(METHODS[n]):
            raise FastForwardError(f"method '{n}' is not available in this build")
    return labels


def build_decoder(
    name: str, target: LoadedModel, draft: LoadedModel | None = None, options: dict[str, Any] | None = None
) -> Decoder:
    spec = METHODS.get(base_method(name))
    if spec is None:
        raise FastForwardError(f"unknown method '{name}'; known: {', '.join(METHODS)}")
    return _module(spec).build(spec.name, target, draft, dict(options or {}))


def build_decoders(
    text: str, target: LoadedModel, draft: LoadedModel | None, options: dict[str, Any]
) -> dict[str, Decoder]:
    """The decoders of one bench run, the AR baseline first.

    ``all`` builds every method and keeps the lossless ones whose decoder is in ``all``; a method that cannot
    be built with these inputs (no draft model, no trained heads) is skipped there and an error when named."""
    labels = resolve_methods(text)
    if BASELINE not in labels:
        labels.insert(0, BASELINE)
    out: dict[str, Decoder] = {}
    for label in labels:
        try:
            dec = build_decoder(label, target, draft, options_for(label, options, labels))
        except MissingInput:
            if text == "all":
                continue
            raise
        if text != "all" or label == BASELINE or (dec.in_all and dec.lossless):
            out[label] = dec
    return out


def options_for(label: str, options: dict[str, Any], labels: list[str]) -> dict[str, Any]:
    """The options of one bench entry: the unscoped ``key=value`` ones that its method accepts, overridden
    by ``label.key=value`` (passed on whole, so the method rejects a misspelt one).

    An unscoped key that no method of the run accepts, or a scope that is not among ``labels``, is an error
    (a typo would otherwise silently change nothing)."""
    for key in options:
        if "." in key:
            if key.split(".", 1)[0] not in labels:
                raise FastForwardError(
                    f"--opt {key}: '{key.split('.', 1)[0]}' is not in --methods ({', '.join(labels)})"
                )
        elif not any(key in option_names(base_method(lb)) for lb in labels):
            raise FastForwardError(
                f"--opt {key}: no method in --methods ({', '.join(labels)}) has this option"
            )
    known = option_names(base_method(label))
    out = {k: v for k, v in options.items() if "." not in k and k in known}
    out.update(
        {k.split(".", 1)[1]: v for k, v in options.items() if k.split(".", 1)[0] == label and "." in k}
    )
    return out

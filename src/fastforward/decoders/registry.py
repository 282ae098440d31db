"""Method names used by ``bench`` and ``generate`` -> the module that builds the decoder, plus what a user
needs to know to pick one (``fastforward methods``).

Each module exposes ``build(name, target, draft, options) -> Decoder`` and ``OPTIONS`` (its options dataclass,
plus ``ALIASES`` where short names exist). What a built decoder *is* (lossless, needs a draft, part of
``all``) is asked of the decoder instance when a run is reported: a configuration can change it (Chimera with
``accept=typical`` is lossy). The static facts kept here (:class:`MethodSpec`) describe the default
configuration for listing and for checking a command line before any model loads; a test keeps them equal to
what the decoders say.

Options are checked here before a module sees them, so no option is ever silently ignored:

- a method gets only the options it reads: the speculative methods share one dataclass, but ``bits`` is
  qsd's and ``ngram_max`` is pld's (each field's ``used_by``, declared with the field by
  :func:`fastforward.core.options.opt`); giving pld ``bits`` is an error, not a no-op;
- in a bench, an unscoped ``--opt key=value`` goes to the methods that read ``key``, and is an error when no
  selected method does, or when ``key`` means different things to two of them (``eps`` is typical's threshold
  cap but consultant's EMA-NLL bound): then it must be scoped, ``typical.eps=0.05``;
- ``--draft`` given to a run where no method takes a draft model is an error.

Modules are imported lazily (they import torch), so a method whose module (or optional dependency) is absent
is simply unavailable rather than breaking the CLI, and checking a command line stays cheap.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastforward.core.options import option_doc, parse_options
from fastforward.errors import FastForwardError

if TYPE_CHECKING:
    from fastforward.core.decoder import Decoder
    from fastforward.models.loading import LoadedModel

__all__ = [
    "METHODS",
    "base_method",
    "build_decoder",
    "build_decoders",
    "check_run",
    "method_options",
    "options_for",
    "parse_options",
    "resolve_methods",
]

BASELINE = "ar"

DRAFT = "a draft model (--draft NAME, same tokenizer)"
DRAFT_ANY = "a draft model (--draft NAME, any tokenizer)"
HEADS = "trained draft heads (--opt heads=PATH, from train-chimera)"


@dataclass(frozen=True)
class MethodSpec:
    name: str
    module: str  # fastforward.decoders.<module>
    summary: str
    lossless: str = "yes"  # in the default configuration; "yes" methods are tested token for token in fp32
    needs: str = ""  # what must be given besides the target model ("" = nothing)
    in_all: bool = True  # part of --methods all (lossless, greedy, nothing trained needed)
    decoding: str = "greedy or sampling"  # or "greedy only" / "sampling only"
    draft_optional: bool = False  # uses --draft when given, runs without one (auto)

    @property
    def needs_draft(self) -> bool:
        return self.needs in (DRAFT, DRAFT_ANY)

    @property
    def takes_draft(self) -> bool:
        return self.needs_draft or self.draft_optional


METHODS: dict[str, MethodSpec] = {
    m.name: m
    for m in [
        MethodSpec(
            "ar",
            "ar",
            "autoregressive baseline (greedy or sampling); every speedup is relative to it",
            lossless="reference",
        ),  # fmt: skip
        MethodSpec(
            "ar_eager",
            "ar",
            "AR without the compiled forward: the eager reference beside compiled AR in a --compile on run "
            "(`all` adds it there)",
            lossless="reference",
            in_all=False,
        ),
        MethodSpec("hf_generate", "hf_generate", "transformers generate(), the peer baseline"),
        MethodSpec(
            "hf_assisted", "hf_generate", "transformers assisted generation with --draft", needs=DRAFT
        ),
        MethodSpec(
            "hf_pld", "hf_generate", "transformers prompt lookup decoding, the peer of pld", in_all=False
        ),
        MethodSpec(
            "jacobi",
            "jacobi",
            "Jacobi decoding with KV cache (CLLM inference; fast on a CLLM-trained "
            "model, about AR speed on a base model)",
        ),  # fmt: skip
        MethodSpec("lookahead", "lookahead", "lookahead decoding: Jacobi window + n-gram pool verification"),
        MethodSpec(
            "suffix",
            "suffix",
            "SuffixDecoding: draft trees from suffix tries over the prompt and earlier outputs (no training, no draft)",
        ),
        MethodSpec(
            "recycle",
            "recycle",
            "Token Recycling: a draft tree from the target's own earlier top-k candidates (no training, no draft)",
        ),
        MethodSpec(
            "sd", "speculative", "speculative decoding, draft model, exact greedy verification", needs=DRAFT
        ),  # fmt: skip
        MethodSpec(
            "sd-sample",
            "speculative",
            "speculative decoding with rejection sampling (needs --temperature > 0)",
            lossless="yes (same distribution as AR sampling)",
            needs=DRAFT,
            in_all=False,
            decoding="sampling only",
        ),  # fmt: skip
        MethodSpec("pld", "speculative", "prompt lookup (n-gram) drafting, exact greedy verification"),
        MethodSpec("layerskip", "speculative", "self-speculative: the target's first k layers draft"),
        MethodSpec("qsd", "speculative", "self-speculative: the target's own int8/int4 copy drafts"),
        MethodSpec(
            "sd-cross",
            "speculative",
            "speculative decoding with a draft of ANOTHER tokenizer (text re-tokenized), exact verification",
            needs=DRAFT_ANY,
            in_all=False,
        ),  # fmt: skip
        MethodSpec(
            "typical",
            "speculative",
            "draft model + typical acceptance",
            lossless="no (lossy)",
            needs=DRAFT,
            in_all=False,
        ),  # fmt: skip
        MethodSpec(
            "consultant",
            "speculative",
            "Consultant Decoding: draft model, EMA-NLL acceptance",
            lossless="no (lossy)",
            needs=DRAFT,
            in_all=False,
        ),  # fmt: skip
        MethodSpec(
            "auto",
            "auto",
            "times the lossless methods briefly on the loaded model (cached per machine) and runs the fastest",
            in_all=False,
            draft_optional=True,
        ),  # fmt: skip
        MethodSpec(
            "chimera",
            "chimera",
            "Chimera draft heads + tree verification",
            lossless="yes with accept=exact (default); lossy with accept=typical or consultant",
            needs=HEADS,
            in_all=False,
        ),  # fmt: skip
    ]
}


@dataclass(frozen=True)
class OptionDoc:
    name: str
    default: str
    help: str
    alias: str = ""


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


def method_options(name: str) -> list[OptionDoc]:
    """The options method ``name`` reads, with their defaults and meaning (imports the method's module):
    each field of the module's options dataclass says all of it where it is declared
    (:func:`fastforward.core.options.opt`)."""
    mod = _module(METHODS[name])
    aliases = {v: k for k, v in getattr(mod, "ALIASES", {}).items()}
    out = []
    for f in dataclasses.fields(mod.OPTIONS):
        reads, default, help_text = option_doc(f, name)
        if reads:
            out.append(OptionDoc(f.name, default, help_text, aliases.get(f.name, "")))
    return out


def option_names(name: str) -> set[str]:
    """The option keys method ``name`` accepts: the fields of its options dataclass that it reads, and
    their aliases."""
    return {k for d in method_options(name) for k in (d.name, d.alias) if k}


def resolve_methods(text: str, draft: bool = True) -> list[str]:
    """Parse ``--methods a,b,c:tag`` (checked: known, no repeats) or ``all``.

    ``all`` is every method that is part of it by default (lossless, greedy, nothing trained) and can run
    with what was given: without a draft model, the draft-model methods are left out. :func:`build_decoders`
    still asks each built decoder whether it belongs there."""
    if text.strip() == "all":
        return [n for n, s in METHODS.items() if s.in_all and (draft or not s.needs_draft)]
    labels = [n.strip() for n in text.split(",") if n.strip()]
    if not labels:
        raise FastForwardError(
            "--methods is empty; give a comma list of methods or 'all' (see fastforward methods)"
        )
    if len(set(labels)) != len(labels):
        raise FastForwardError(f"--methods lists a method twice: {text} (tag the second one, e.g. chimera:b)")
    for label in labels:
        n = base_method(label)
        if n not in METHODS:
            raise FastForwardError(
                f"unknown method '{n}'; known: {', '.join(METHODS)} (see fastforward methods)"
            )
    return labels


def _check_keys(label: str, options: Mapping[str, Any]) -> None:
    """Every key of ``options`` must be an option that ``label``'s method reads."""
    if not options:
        return  # without importing the method's module
    name = base_method(label)
    known = option_names(name)
    for key in options:
        if key in known:
            continue
        users = [m for m in METHODS if m != name and _module_has(m, key) and key in option_names(m)]
        if users:
            raise FastForwardError(
                f"{name}: option '{key}' is not used by {name} (it is an option of {', '.join(users)}); "
                f"{name} takes: {', '.join(sorted(known)) or 'no options'}"
            )
        raise FastForwardError(
            f"{name}: unknown option '{key}'; known: {', '.join(sorted(known)) or 'none (it takes no options)'}"
        )


def _module_has(name: str, key: str) -> bool:
    """Whether method ``name``'s module is installed and could know ``key`` at all (a field of its options)."""
    spec = METHODS[name]
    return available(spec) and key in {f.name for f in dataclasses.fields(_module(spec).OPTIONS)}


def options_for(label: str, options: dict[str, Any], labels: list[str]) -> dict[str, Any]:
    """The options of one bench entry: the unscoped ``key=value`` ones that its method reads, overridden
    by ``label.key=value`` (checked against its method, so a misspelt one is an error).

    An unscoped key that no method of the run reads, one that two of them read differently, or a scope that
    is not among ``labels`` is an error (a typo would otherwise silently change nothing)."""
    for key in options:
        if "." in key:
            scope = key.split(".", 1)[0]
            if scope not in labels:
                raise FastForwardError(f"--opt {key}: '{scope}' is not in --methods ({', '.join(labels)})")
            continue
        readers = [lb for lb in labels if key in option_names(base_method(lb))]
        if not readers:
            raise FastForwardError(
                f"--opt {key}: no method in --methods ({', '.join(labels)}) has this option "
                "(see fastforward methods)"
            )
        meanings = {_meaning(base_method(lb), key) for lb in readers}
        if len(meanings) > 1:
            scoped = " or ".join(f"{lb}.{key}={options[key]}" for lb in readers)
            raise FastForwardError(
                f"--opt {key}={options[key]} is ambiguous: {key} means different things to "
                f"{', '.join(readers)}; scope it: {scoped}"
            )
    known = option_names(base_method(label))
    out = {k: v for k, v in options.items() if "." not in k and k in known}
    scoped = {k.split(".", 1)[1]: v for k, v in options.items() if "." in k and k.split(".", 1)[0] == label}
    _check_keys(label, scoped)
    out.update(scoped)
    return out


def _meaning(name: str, key: str) -> str:
    """What ``key`` does for method ``name`` and its default there: two methods that differ in either read
    one unscoped value differently."""
    docs = {d.name: d for d in method_options(name)}
    field_name = next((d.name for d in docs.values() if key in (d.name, d.alias)), key)
    doc = docs[field_name]
    return f"{doc.help} (default {doc.default})"


def check_run(
    text: str, options: Mapping[str, Any], draft: bool, baseline: bool = True, greedy: bool | None = None
) -> dict[str, dict[str, Any]]:
    """Check a run's methods, options and ``--draft`` without loading a model: label -> its options.

    ``text`` is ``--methods`` (the AR baseline is added when missing) or one ``--method``. Errors: unknown
    method or option, an option no method reads or two read differently, a named method that needs a draft
    model or trained heads it was not given, and ``--draft`` when no method takes one (with ``all``, --draft
    adds the draft-model methods, so it is always used). ``baseline=False`` checks one method alone
    (``generate --method``): every option must be one it reads. ``greedy`` (when known) also refuses a
    method that cannot decode that way (jacobi with sampling, sd-sample greedy)."""
    labels = resolve_methods(text, draft)
    if not baseline:
        if len(labels) != 1 or text.strip() == "all":
            raise FastForwardError(f"--method takes one method, got '{text}'")
        own = {k.split(".", 1)[1] if k.startswith(labels[0] + ".") else k: v for k, v in options.items()}
        _check_keys(labels[0], own)
        options = own
    elif BASELINE not in labels:
        labels.insert(0, BASELINE)
    named = text.strip() != "all"
    for label in labels:
        spec = METHODS[base_method(label)]
        if named and spec.needs_draft and not draft:
            raise FastForwardError(f"method '{spec.name}' needs a draft model: pass --draft NAME")
        if greedy is not None and spec.decoding == ("sampling only" if greedy else "greedy only"):
            leave = "leave it out of --methods" if named else "name the methods instead of 'all'"
            fix = "set --temperature above 0" if greedy else f"use --temperature 0, or {leave}"
            kind = spec.decoding.replace(" only", "")
            raise FastForwardError(f"method '{spec.name}' supports {kind} decoding only: {fix}")
    if draft and not any(METHODS[base_method(lb)].takes_draft for lb in labels):
        takers = ", ".join(n for n, s in METHODS.items() if s.takes_draft)
        raise FastForwardError(
            f"--draft is not used by {', '.join(labels)}: only {takers} take a draft model; drop --draft"
        )
    if not baseline:
        plan = {labels[0]: dict(options)}
    else:
        plan = {label: options_for(label, dict(options), labels) if options else {} for label in labels}
    for label, opts in plan.items():
        spec = METHODS[base_method(label)]
        if spec.needs == HEADS:
            heads = opts.get("heads")
            if named and not heads:
                raise FastForwardError(
                    f"{label} needs a trained draft: --opt heads=PATH (see `fastforward train-chimera`)"
                )
            if heads and not Path(str(heads)).expanduser().is_dir():
                raise FastForwardError(
                    f"{label}: --opt heads={heads}: no such directory (train-chimera --out)"
                )
        if opts:
            _check_values(label, opts)
    return plan


def _check_values(label: str, options: Mapping[str, Any]) -> None:
    """Types, ranges and cross-field rules of ``options`` (the method's own dataclass check), so that
    ``block_size=0`` is an error before a model loads rather than after."""
    from fastforward.core.options import build_config

    name = base_method(label)
    mod = _module(METHODS[name])
    build_config(mod.OPTIONS, options, name, getattr(mod, "ALIASES", None))


def build_decoder(
    name: str, target: LoadedModel, draft: LoadedModel | None = None, options: dict[str, Any] | None = None
) -> Decoder:
    spec = METHODS.get(base_method(name))
    if spec is None:
        raise FastForwardError(f"unknown method '{name}'; known: {', '.join(METHODS)}")
    if not available(spec):
        raise FastForwardError(f"method '{spec.name}' is not available in this build")
    options = dict(options or {})
    _check_keys(name, options)
    return _module(spec).build(spec.name, target, draft, options)


def models_run(decoder: Decoder, target: LoadedModel, draft: LoadedModel | None = None) -> list[Any]:
    """Every model a decoder's steps run: the target, the draft model given (``--draft``), and the draft models
    its drafter built itself (qsd's quantized copy, layerskip's layer view), each once. What a long session
    (a server, a chat) loads the stored compiled packages of before its first request."""
    from fastforward.decoders.speculative import draft_models

    decoder = getattr(decoder, "chosen", decoder)  # ``auto``: the method it chose
    found = [target.model] + ([draft.model] if draft is not None else [])
    found += draft_models(getattr(decoder, "drafter", None))
    return list({id(m): m for m in found}.values())


def build_decoders(
    text: str, target: LoadedModel, draft: LoadedModel | None, options: dict[str, Any]
) -> dict[str, Decoder]:
    """The decoders of one bench run, the AR baseline first (options checked by :func:`check_run`).

    ``all`` builds every method that belongs there and keeps the lossless ones whose decoder says it is in
    ``all``; a method that cannot be built with these inputs (no trained heads) or is not installed is
    skipped there, and an error when named."""
    from fastforward.core.decoder import MissingInput

    plan = check_run(text, options, draft is not None)
    out: dict[str, Decoder] = {}
    for label, opts in plan.items():
        if text.strip() == "all" and not available(METHODS[base_method(label)]):
            continue
        try:
            dec = build_decoder(label, target, draft, opts)
        except MissingInput:
            if text.strip() == "all":
                continue
            raise
        if text.strip() != "all" or label == BASELINE or (dec.in_all and dec.lossless):
            out[label] = dec
    from fastforward.core.compiled import compiled

    if text.strip() == "all" and compiled(target.model) is not None:
        # a compiled run's `all` times eager AR too, right after the compiled AR every row is divided by
        out = {BASELINE: out.pop(BASELINE), "ar_eager": build_decoder("ar_eager", target), **out}
    return out

"""What a user may constrain output to, turned into one grammar for the matcher (:mod:`fastforward.core.constraint`).

Four kinds, the ones OpenAI-style APIs and the engines' users ask for: ``json_schema`` (a JSON Schema),
``json_object`` (any JSON object), ``regex`` and ``choice`` (one of a list of strings). The grammar library is
llguidance (Microsoft's, on PyPI, the one vLLM and SGLang also ship): it computes a token mask on the CPU in
tens of microseconds for JSON schemas without precomputing per-state tables (a tree of a schema's states is
walked lazily), covers the JSON-Schema features tool calls use (nested objects, arrays, enums, required
fields, patterns), and gives the forced continuation (jump-forward) and token-level rollback we need for
drafts. xgrammar precomputes per-grammar caches (slow to compile for each new schema on 2 cores) and its
rollback is bounded; for a server that sees a new schema per tool, llguidance fits better.

This module is torch-free and model-free: it checks what was asked and builds the grammar text, so a CLI or
a server can refuse a bad schema in one line before a model is loaded.
"""

from __future__ import annotations

import json
import re
from typing import Any

from fastforward.errors import FastForwardError

KINDS = ("json_schema", "json_object", "regex", "choice")
LABELS = {"json_schema": "JSON schema", "json_object": "JSON object", "regex": "regex", "choice": "choice"}
# JSON as json.dumps writes it: no free whitespace between tokens. Flexible whitespace lets a small model pad
# an answer with newlines until the length cap (a known failure of constrained decoding), and a fixed layout
# forces more of the text (keys, separators), which the speculative methods then propose for free
JSON_FORMAT = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
MAX_SPEC_CHARS = 100_000  # a schema / regex larger than this is refused (a grammar that size is an attack)


def _llguidance() -> Any:
    try:
        import llguidance
    except ImportError:  # pragma: no cover - installed with the package
        raise FastForwardError(
            "structured output needs llguidance: pip install llguidance (in requirements/cpu.txt)"
        ) from None
    return llguidance


def grammar_for(kind: str, spec: Any) -> str:
    """The llguidance grammar for a constraint of ``kind``; a one-line error for a bad ``spec``.

    ``json_schema``: a schema (dict, or its JSON text); ``json_object``: ignored (any object); ``regex``: a
    pattern the whole output must match; ``choice``: a list of strings, the output is exactly one of them."""
    llg = _llguidance()
    if kind not in KINDS:
        raise FastForwardError(f"unknown constraint '{kind}'; choose one of {', '.join(KINDS)}")
    if kind == "json_object":
        spec = {"type": "object"}
        kind = "json_schema"
    if kind == "json_schema":
        if isinstance(spec, str):
            if len(spec) > MAX_SPEC_CHARS:
                raise FastForwardError(f"the JSON schema is longer than {MAX_SPEC_CHARS} characters")
            try:
                spec = json.loads(spec)
            except json.JSONDecodeError as e:
                raise FastForwardError(
                    f"the JSON schema is not valid JSON: {e.msg} (line {e.lineno})"
                ) from None
        if not isinstance(spec, dict):
            raise FastForwardError(f"a JSON schema must be an object, got {type(spec).__name__}")
        if len(json.dumps(spec)) > MAX_SPEC_CHARS:
            raise FastForwardError(f"the JSON schema is longer than {MAX_SPEC_CHARS} characters")
        try:
            grammar = llg.LLMatcher.grammar_from_json_schema(spec, defaults=JSON_FORMAT)
        except (ValueError, TypeError) as e:
            raise FastForwardError(f"invalid JSON schema: {_one_line(e)}") from None
    elif kind == "regex":
        if not isinstance(spec, str) or not spec:
            raise FastForwardError("a regex constraint must be a non-empty string")
        if len(spec) > MAX_SPEC_CHARS:
            raise FastForwardError(f"the regex is longer than {MAX_SPEC_CHARS} characters")
        grammar = llg.LLMatcher.grammar_from_regex(spec)
    else:  # choice
        if not isinstance(spec, (list, tuple)) or not spec or not all(isinstance(s, str) and s for s in spec):
            raise FastForwardError("a choice constraint must be a non-empty list of non-empty strings")
        grammar = llg.LLMatcher.grammar_from_regex("|".join(f"(?:{re.escape(s)})" for s in spec))
    check_grammar(grammar, kind)
    return grammar


def check_grammar(grammar: str, kind: str = "grammar") -> None:
    """Refuse a grammar llguidance cannot compile (a bad regex, an unsupported schema keyword) in one line."""
    llg = _llguidance()
    is_error, messages = llg.LLMatcher.validate_grammar_with_warnings(grammar)
    if is_error:
        raise FastForwardError(f"invalid {LABELS.get(kind, kind)}: {_one_line(messages[0])}")


def _one_line(x: object) -> str:
    text = " ".join(str(x).split())
    return text if len(text) <= 300 else text[:297] + "..."

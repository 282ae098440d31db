"""Method options: ``--opt key=value`` strings -> a method's frozen config dataclass, checked once.

Every method declares its options as a dataclass (types and defaults in the annotations, ranges and choices
in ``field(metadata=...)``, cross-field rules in an optional ``validate()``). :func:`build_config` is the one
parser: unknown keys, wrong types and out-of-range values are one-line errors naming the method and the
option, so a typo never silently changes nothing.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

from fastforward.errors import FastForwardError

C = TypeVar("C")


def opt(
    default: Any,
    *,
    min: float | None = None,  # noqa: A002
    max: float | None = None,  # noqa: A002
    choices: tuple = (),
    help: str = "",  # noqa: A002
    help_by: Mapping[str, str] | None = None,
    shown: str = "",
    shown_by: Mapping[str, str] | None = None,
    used_by: tuple[str, ...] = (),
) -> Any:
    """A method option, declared once with everything said about it: ``block_size: int = opt(16, min=1,
    help="positions solved in parallel per block (n)")``.

    ``min``/``max``/``choices`` are checked by :func:`build_config`. The rest is what ``fastforward
    methods`` prints and what the registry checks a command line with: ``help`` (``help_by`` per method,
    where methods sharing a dataclass read the key differently), ``shown`` (the default as text where the
    value is computed; ``shown_by`` per method), and ``used_by`` (the methods of a shared dataclass that
    read the field; empty: all of them), so an option given to a method that ignores it is an error."""
    meta: dict[str, Any] = {
        k: v for k, v in (("min", min), ("max", max), ("choices", choices)) if v not in (None, ())
    }
    extra = (
        ("help", help),
        ("help_by", help_by),
        ("shown", shown),
        ("shown_by", shown_by),
        ("used_by", used_by),
    )
    meta.update({k: v for k, v in extra if v})
    return dataclasses.field(default=default, metadata=meta)


def option_doc(field: dataclasses.Field, method: str) -> tuple[bool, str, str]:
    """What a field declared with :func:`opt` says to method ``method``: (whether it reads the field, the
    default as text, the help text)."""
    meta = field.metadata
    used = meta.get("used_by", ())
    shown = meta.get("shown_by", {}).get(method) or meta.get("shown", "")
    if not shown:
        shown = "" if field.default is dataclasses.MISSING else str(field.default).lower()
        shown = shown if field.default != "" else '""'
    return (not used or method in used), shown, meta.get("help_by", {}).get(method) or meta.get("help", "")


def parse_options(pairs: list[str] | None) -> dict[str, Any]:
    """``["block_size=16", "eps=2.0", "init=random", "adaptive=true"]`` -> {key: int | float | bool | str}."""
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


def build_config(
    cls: type[C], options: Mapping[str, Any], method: str, aliases: Mapping[str, str] | None = None
) -> C:
    """Check ``options`` against the dataclass ``cls`` and build it (then run its ``validate()``, if any)."""
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for key, raw in options.items():
        name = (aliases or {}).get(key, key)
        if name not in fields:
            known = ", ".join(sorted(fields)) or "none"
            raise FastForwardError(f"{method}: unknown option '{key}'; known: {known}")
        values[name] = _coerce(method, name, raw, hints[name], fields[name].metadata)
    return check_config(cls(**values), method)


def check_config(config: C, method: str) -> C:
    """Check a built config's fields against their ranges and choices, then its own ``validate()``.

    Decoders call this on configs handed to them directly too, so every path into a method is checked."""
    hints = typing.get_type_hints(type(config))
    for f in dataclasses.fields(config):  # type: ignore[arg-type]
        value = getattr(config, f.name)
        _coerce(method, f.name, value, hints[f.name], f.metadata)
    check = getattr(config, "validate", None)
    if callable(check):
        check()
    return config


def _coerce(method: str, name: str, value: Any, hint: Any, meta: Mapping[str, Any]) -> Any:
    kinds = [t for t in typing.get_args(hint) if t is not type(None)] or [hint]
    if value is None and type(None) in typing.get_args(hint):
        return None
    kind = kinds[0]
    bad = FastForwardError(f"{method}: option {name} must be {_describe(kind, meta)}, got {value!r}")
    if kind is bool:
        if not isinstance(value, bool):
            raise bad
    elif kind is int:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
            raise bad
        value = int(value)
    elif kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad
        value = float(value)
    elif kind is str:
        value = str(value)
    if "choices" in meta and value not in meta["choices"]:
        raise bad
    if "min" in meta and value < meta["min"] or "max" in meta and value > meta["max"]:
        raise bad
    return value


def _describe(kind: Any, meta: Mapping[str, Any]) -> str:
    if "choices" in meta:
        return "one of " + ", ".join(str(c) for c in meta["choices"])
    word = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(kind, str(kind))
    if "min" in meta and "max" in meta:
        return f"{word} in [{meta['min']}, {meta['max']}]"
    if "min" in meta:
        return f"{word} >= {meta['min']}"
    if "max" in meta:
        return f"{word} <= {meta['max']}"
    return word

"""User data via ``--data-path FILE.jsonl``: one JSON object a line, with exactly one of

- ``prompt`` or ``question``: a non-empty string (one user turn);
- ``turns``: a non-empty list of non-empty strings (user turns; a later turn sees AR's earlier answers);
- ``messages``: a list of ``{"role": ..., "content": ...}`` (roles system, user, assistant); the user
  messages' contents become the turns (at least one), other roles are ignored,

plus an optional ``answer`` (string or number, the gold answer) and ``id`` (string or number).

Every record is checked as it is read, and a bad one is a one-line error naming the file, the line, the
field, the value and what is accepted: nothing is guessed (a string ``turns`` is not split into characters,
an empty prompt is not answered).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fastforward.data.base import Sample
from fastforward.errors import FastForwardError

PROMPT_KEYS = ("prompt", "question", "turns", "messages")
ROLES = ("system", "user", "assistant")


def _show(value: Any, limit: int = 40) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number"
    )


def _text(value: Any, where: str, field: str) -> str:
    if not isinstance(value, str):
        raise FastForwardError(
            f"{where}: '{field}' must be a non-empty string, got {_kind(value)} {_show(value)}"
        )
    if not value.strip():
        raise FastForwardError(f"{where}: '{field}' is empty; give the text to answer")
    return value


def turns_of(rec: dict[str, Any], where: str) -> tuple[str, ...]:
    """The user turns of one record (see the module docstring), or a one-line error."""
    given = [k for k in PROMPT_KEYS if k in rec]
    if not given:
        raise FastForwardError(
            f"{where}: needs one of {', '.join(repr(k) for k in PROMPT_KEYS)}; got keys {sorted(rec) or 'none'}"
        )
    if len(given) > 1:
        raise FastForwardError(f"{where}: has both '{given[0]}' and '{given[1]}'; give only one of them")
    key = given[0]
    value = rec[key]
    if key in ("prompt", "question"):
        return (_text(value, where, key),)
    if key == "turns":
        if not isinstance(value, list) or not value:
            hint = '; for one turn use {"prompt": ...}' if isinstance(value, str) else ""
            raise FastForwardError(
                f"{where}: 'turns' must be a non-empty list of strings (one per user turn), got "
                f"{_kind(value)} {_show(value)}{hint}"
            )
        return tuple(_text(t, where, f"turns[{i}]") for i, t in enumerate(value))
    if not isinstance(value, list) or not value:
        raise FastForwardError(
            f'{where}: \'messages\' must be a non-empty list of {{"role", "content"}} objects, got '
            f"{_kind(value)} {_show(value)}"
        )
    turns = []
    for i, m in enumerate(value):
        if not isinstance(m, dict):
            raise FastForwardError(
                f"{where}: messages[{i}] must be an object with 'role' and 'content', got {_kind(m)} {_show(m)}"
            )
        for part in ("role", "content"):
            if part not in m:
                raise FastForwardError(
                    f"{where}: messages[{i}] has no '{part}' (keys: {', '.join(sorted(m))})"
                )
        if m["role"] not in ROLES:
            raise FastForwardError(
                f"{where}: messages[{i}].role must be one of {', '.join(ROLES)}, got {_show(m['role'])}"
            )
        if m["role"] == "user":
            turns.append(_text(m["content"], where, f"messages[{i}].content"))
    if not turns:
        raise FastForwardError(f"{where}: 'messages' has no message with role 'user'")
    return tuple(turns)


def _scalar(rec: dict[str, Any], key: str, where: str) -> str | None:
    value = rec.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise FastForwardError(
            f"{where}: '{key}' must be a string or a number, got {_kind(value)} {_show(value)}"
        )
    return str(value)


def load(path: str | Path) -> Iterator[Sample]:
    p = Path(path).expanduser()
    if not p.exists():
        raise FastForwardError(f"data file not found: {p}")
    if p.is_dir():
        raise FastForwardError(
            f"--data-path: {p} is a directory; expected a JSONL file (one JSON object a line)"
        )
    records = 0
    try:
        f = p.open("rb")
    except OSError as e:
        raise FastForwardError(f"cannot read data file {p}: {e.strerror}") from None
    with f:
        for n, raw in enumerate(f, 1):
            where = f"{p}:{n}"
            try:
                line = raw.decode("utf-8-sig" if n == 1 else "utf-8")  # a BOM is no error
            except UnicodeDecodeError as e:
                raise FastForwardError(
                    f"{where}: not UTF-8 text (byte 0x{raw[e.start]:02x} at column {e.start + 1}); save the "
                    "file as UTF-8"
                ) from None
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise FastForwardError(f"{where}: not valid JSON ({e.msg}, column {e.colno})") from None
            if not isinstance(rec, dict):
                raise FastForwardError(f"{where}: expected a JSON object, got {_kind(rec)} {_show(rec)}")
            turns = turns_of(rec, where)
            records += 1
            yield Sample(
                id=_scalar(rec, "id", where) or f"{p.stem}-{n}",
                dataset=p.stem,
                turns=turns,
                answer=_scalar(rec, "answer", where),
            )
    if not records:
        raise FastForwardError(f"{p} holds no records; expected one JSON object a line")

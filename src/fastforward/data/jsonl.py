"""User data via ``--data-path FILE.jsonl``: one record per line with ``prompt``, ``question``, ``turns``
or ``messages`` (user contents are taken), and an optional ``answer``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from fastforward.data.base import Sample
from fastforward.errors import FastForwardError


def load(path: str | Path) -> Iterator[Sample]:
    p = Path(path)
    if not p.exists():
        raise FastForwardError(f"data file not found: {p}")
    with p.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise FastForwardError(f"{p}:{n}: not valid JSON ({e.msg})") from None
            if not isinstance(rec, dict):
                raise FastForwardError(f"{p}:{n}: expected a JSON object")
            if "turns" in rec:
                turns = tuple(rec["turns"])
            elif "messages" in rec:
                turns = tuple(m["content"] for m in rec["messages"] if m.get("role") == "user")
            elif "prompt" in rec or "question" in rec:
                turns = (rec.get("prompt") or rec["question"],)
            else:
                raise FastForwardError(f"{p}:{n}: needs one of 'prompt', 'question', 'turns', 'messages'")
            if not turns or not all(isinstance(t, str) and t for t in turns):
                raise FastForwardError(f"{p}:{n}: empty or non-text prompt")
            answer = rec.get("answer")
            yield Sample(
                id=str(rec.get("id", f"{p.stem}-{n}")),
                dataset=p.stem,
                turns=turns,
                answer=None if answer is None else str(answer),
            )

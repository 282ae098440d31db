"""Checks shared by every method that pairs a draft model with a target."""

from __future__ import annotations

from fastforward.errors import FastForwardError
from fastforward.models.loading import LoadedModel


def check_same_tokenizer(target: LoadedModel, draft: LoadedModel) -> None:
    """Draft and target must map text to the same ids, or draft tokens mean nothing to the target.

    Two tokenizer-free (ids-only) test models have nothing to compare and pass."""
    t, d = target.tokenizer, draft.tokenizer
    if t is None and d is None:
        return
    if t is None or d is None:
        raise FastForwardError(f"'{target.name}' and '{draft.name}': only one has a tokenizer")
    probe = "def f(x):\n    return x * 2  # héllo wörld 123"
    same = t.get_vocab() == d.get_vocab() if len(t) == len(d) else False
    if not same or t.encode(probe) != d.encode(probe):
        raise FastForwardError(
            f"draft '{draft.name}' and target '{target.name}' use different tokenizers "
            f"({len(d)} vs {len(t)} tokens); pick a draft from the target's model family, or use --method sd-cross"
        )

"""When is a token sequence repetitive: the rules behind ``repetition_rate`` and CLLM data cleaning.

Small models sometimes loop. A sequence counts as repetitive when it shows a run of ``max_run`` identical
tokens, an n-gram occurring ``max_ngram_repeats`` times, or a repeated sentence (the token span between
sentence delimiters, at least ``min_sentence_tokens`` long). The CLLM reference only catches single-token
runs; the n-gram and sentence rules catch the loops it misses.

The rules live in ``eval`` (pure functions over token ids) so that quality reports measure repetition with
exactly the thresholds CLLM training cleans its data with (:class:`fastforward.cllm.augment.CleanConfig`
extends :class:`RepetitionRules`), without evaluation depending on training code.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class RepetitionRules:
    """Thresholds of the three rules; 0 disables a rule."""

    max_run: int = 10  # a run of >= max_run identical tokens
    ngram: int = 8
    max_ngram_repeats: int = 3  # an n-gram occurring this often
    min_sentence_tokens: int = 6  # repeated sentences shorter than this are allowed


def longest_run(tokens: Sequence[int]) -> int:
    best = cur = 0
    prev = None
    for t in tokens:
        cur = cur + 1 if t == prev else 1
        prev = t
        best = max(best, cur)
    return best


def max_ngram_count(tokens: Sequence[int], n: int, new_from: int = 0) -> int:
    """Largest occurrence count (over the whole sequence) of an n-gram that ends at or after ``new_from``."""
    if n <= 0 or len(tokens) < n:
        return 0
    grams = Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))
    start = max(0, new_from - n + 1)
    return max((grams[tuple(tokens[i : i + n])] for i in range(start, len(tokens) - n + 1)), default=0)


def sentences(tokens: Sequence[int], delimiters: set[int]) -> list[tuple[int, tuple[int, ...]]]:
    """(end index, sentence tokens incl. delimiter) for each delimited sentence."""
    out, start = [], 0
    for i, t in enumerate(tokens):
        if t in delimiters:
            out.append((i, tuple(tokens[start : i + 1])))
            start = i + 1
    return out


def repeated_sentence(tokens: Sequence[int], delimiters: set[int], min_len: int, new_from: int = 0) -> bool:
    """A sentence of >= min_len tokens ending at or after ``new_from`` also occurs earlier."""
    if not delimiters or min_len <= 0:
        return False
    seen: set[tuple[int, ...]] = set()
    for end, s in sentences(tokens, delimiters):
        key = tuple(t for t in s if t not in delimiters)
        if len(key) >= min_len:
            if end >= new_from and key in seen:
                return True
            seen.add(key)
    return False


def is_repetitive(
    tokens: Sequence[int], rules: RepetitionRules | None = None, delimiters: set[int] | None = None
) -> bool:
    """The rules over a whole output (the repetition rate of generated answers); default thresholds if None."""
    rules = rules or RepetitionRules()
    return bool(
        (rules.max_run and longest_run(tokens) >= rules.max_run)
        or (rules.max_ngram_repeats and max_ngram_count(tokens, rules.ngram) >= rules.max_ngram_repeats)
        or (delimiters and repeated_sentence(tokens, delimiters, rules.min_sentence_tokens))
    )

"""N-gram lookup over the committed sequence: the one index behind prompt lookup (``pld``, the lookup half of
``lookup_first``) and Chimera's lookup branch. A shared tool of several proposers, not a method, so that no
method module imports another (``tests/test_architecture.py``)."""

from __future__ import annotations

from fastforward.errors import FastForwardError


def find_ngram_continuation(tokens: list[int], gamma: int, ngram_max: int, ngram_min: int) -> list[int]:
    """Prompt lookup: the longest suffix n-gram (ngram_max down to ngram_min) that occurred earlier in
    ``tokens``; return up to ``gamma`` tokens that followed its most recent earlier occurrence."""
    length = len(tokens)
    for n in range(min(ngram_max, length - 1), ngram_min - 1, -1):
        suffix = tokens[length - n :]
        for start in range(length - n - 1, -1, -1):  # most recent match first, excluding the suffix itself
            if tokens[start : start + n] == suffix:
                return tokens[start + n : start + n + gamma]
    return []


def check_ngram_range(ngram_min: int, ngram_max: int) -> None:
    """The one check of an n-gram lookup's sizes (pld, lookup_first, Chimera's lookup branch)."""
    if not 1 <= ngram_min <= ngram_max:
        raise FastForwardError(f"need 1 <= ngram_min <= ngram_max, got {ngram_min} and {ngram_max}")


class NGramIndex:
    """The most recent start of every n-gram (ngram_min <= n <= ngram_max) that some token follows, kept up to
    date as the sequence grows, so a lookup costs O(ngram_max) instead of a scan of the whole sequence.

    ``continuation`` returns exactly what :func:`find_ngram_continuation` returns for the same tokens."""

    def __init__(self, ngram_max: int, ngram_min: int) -> None:
        self.ngram_max, self.ngram_min = ngram_max, ngram_min
        self.tokens: list[int] = []
        self.last: dict[tuple[int, ...], int] = {}

    def extend(self, tokens: list[int]) -> None:
        """Index ``tokens``, which must extend what was indexed before (else the index starts over)."""
        n_old = len(self.tokens)
        if len(tokens) < n_old or tokens[:n_old] != self.tokens:
            self.tokens, self.last, n_old = [], {}, 0
        self.tokens = list(tokens)
        # an n-gram is indexed once a token follows it: starts s with s + n <= len - 1
        for end in range(max(n_old - 1, 0), len(tokens) - 1):  # n-grams ending at index end
            for n in range(self.ngram_min, min(self.ngram_max, end + 1) + 1):
                self.last[tuple(tokens[end - n + 1 : end + 1])] = end - n + 1

    def match(self) -> tuple[int, int]:
        """The longest suffix n-gram seen before, as (n, where its continuation starts); (0, 0) for none."""
        t, length = self.tokens, len(self.tokens)
        for n in range(min(self.ngram_max, length - 1), self.ngram_min - 1, -1):
            start = self.last.get(tuple(t[length - n :]))
            if start is not None:
                return n, start + n
        return 0, 0

    def continuation(self, gamma: int) -> list[int]:
        n, at = self.match()
        return self.tokens[at : at + gamma] if n else []

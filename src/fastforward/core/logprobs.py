"""Log-probabilities of the committed tokens, for every method, from the verify forward that scored them.

A step's committed tokens are a path through its block: the anchor (node 0), then the accepted guesses, then
the token the target added. The distribution each committed token was chosen from is the target's logits at
the node before it on that path, which the verify forward already computed; so :class:`LogprobTrace` keeps the
last forward's block and logits and, at commit, walks the block along the committed tokens. Any method, tree
or chain, batched or not, gets AR's log-probabilities this way (in fp32 equal to AR's up to the rounding of a
wider forward), with no extra forward.

What is reported is ``log_softmax`` of the target's logits (masked by a constraint, if any: the distribution
decoding chose from), before temperature, top-k and top-p, as vLLM reports by default.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

MAX_TOP = 20  # OpenAI's limit for top_logprobs


@dataclass(frozen=True)
class TokenLogprob:
    token: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()  # the ``top`` most likely tokens at that position, best first


class Emitted(list):
    """The tokens one step committed, as passed to a token callback; ``logprobs`` holds their entries when
    the generation asked for them (a plain list otherwise, so callbacks that only want ids see no change)."""

    logprobs: list[TokenLogprob | None] | None = None


class LogprobTrace:
    """One request's view of the last forward that scored its tokens (see the module docstring)."""

    def __init__(self, top: int) -> None:
        self.top = top
        self.entries: list[TokenLogprob | None] = []
        self._logits: torch.Tensor | None = None
        self._kids: dict[tuple[int, int], list[int]] = {}
        self._node = -1

    def observe(self, tokens: list[int], parents: list[int], logits: torch.Tensor) -> None:
        """A forward scored ``logits`` [n, V] after the block's nodes; the next commit starts at its root."""
        self._logits = logits
        self._kids = {}
        for i, p in enumerate(parents):
            self._kids.setdefault((int(p), int(tokens[i])), []).append(i)
        self._node = 0

    def _match(self, node: int, tokens: list[int]) -> list[int]:
        """The longest path of block nodes from ``node`` spelling a prefix of ``tokens`` ([node, n1, ...]).
        Several nodes may hold one token under one parent (lookahead's window beside its candidates); each
        sees only its ancestors, so they are scored alike, and the path that goes on is the one committed."""
        best = [node]
        if tokens:
            for child in self._kids.get((node, int(tokens[0])), []):
                sub = self._match(child, tokens[1:])
                if len(sub) + 1 > len(best):
                    best = [node, *sub]
        return best

    def take(self, committed: list[int]) -> list[TokenLogprob | None]:
        """The entries of ``committed`` (in order), walking the block from where the last commit stopped; a
        token the block cannot account for (never expected) gets None, and so does everything after it."""
        out: list[TokenLogprob | None] = []
        if self._node < 0 or self._logits is None:
            out = [None] * len(committed)
        else:
            path = self._match(self._node, committed)
            for i, tok in enumerate(committed):
                out.append(entry(self._logits[path[i]], int(tok), self.top) if i < len(path) else None)
            self._node = path[len(committed)] if len(path) > len(committed) else -1
        self.entries += out
        return out


def entry(logits: torch.Tensor, token: int, top: int) -> TokenLogprob:
    lsm = logits.float().log_softmax(-1)
    best: tuple[tuple[int, float], ...] = ()
    if top > 0:
        vals, ids = lsm.topk(min(top, lsm.shape[-1]))
        best = tuple(
            (int(i), float(v)) for v, i in zip(vals.tolist(), ids.tolist(), strict=True) if v > float("-inf")
        )
    return TokenLogprob(token, float(lsm[token]), best)

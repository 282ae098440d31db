"""A constraint on the output (JSON schema, JSON object, regex, choice) as a token-level matcher every method
decodes through.

Exactness under a constraint means: the output equals *constrained greedy AR*, which at each position takes
the argmax of the target's logits with the tokens the grammar forbids set to -inf, and stops when the grammar
is complete. Every method reaches it the same way, in two places shared by all of them:

- the verify forward's logits are masked per node (:meth:`Matcher.mask_tree`): node i's logits get the mask
  of the grammar state after the path root -> i (each guessed token advances the matcher; the walk rolls it
  back). A guess the grammar forbids can then never equal the masked argmax, so it is rejected like any wrong
  guess, and under sampling the tree rule samples from the masked distribution (a forbidden token has
  probability 0). Nodes below a forbidden guess keep their raw logits: no acceptance can reach them.
- :meth:`fastforward.core.decoder.Run.commit` advances the matcher through the committed tokens and ends the
  generation when the grammar is complete (nothing but EOS could follow).

Deterministic guesses the grammar forbids can be dropped before the forward (:meth:`Matcher.prune`), which
changes nothing but the forward's width (a point-mass guess with target probability 0 is rejected with
certainty and leaves the residual distribution unchanged). Guesses drawn from a draft distribution are never
pruned: there the rejection's residual depends on them. Where the grammar allows exactly one continuation,
:meth:`Matcher.forced` gives it (jump-forward), which speculative methods propose as a free draft.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch

from fastforward.core.grammar import LABELS, _llguidance, grammar_for
from fastforward.errors import FastForwardError

_BITS = torch.arange(32, dtype=torch.int32)
JUMP_MAX = 16  # most grammar-forced tokens proposed in one step (jump-forward)


@dataclass(frozen=True, eq=False)
class Constraint:
    """What the output must match (``kind``, ``spec`` as asked) for one model's tokenizer; :meth:`matcher`
    gives each request a fresh matcher (a copy of one compiled here once)."""

    kind: str
    spec: Any
    grammar: str
    _proto: Any = field(repr=False)  # an llguidance LLMatcher in its start state, copied per request
    vocab: int  # logits per position (may exceed the tokenizer's ids: padded embedding rows)

    @staticmethod
    def of(kind: str, spec: Any, tokenizer: Any, vocab: int, eos_token_ids: tuple[int, ...]) -> Constraint:
        """Compile ``kind``/``spec`` (see :func:`fastforward.core.grammar.grammar_for`) for ``tokenizer`` (a
        transformers fast tokenizer, or an ``llguidance.LLTokenizer``)."""
        llg = _llguidance()
        grammar = grammar_for(kind, spec)
        lltok = llg_tokenizer(tokenizer, vocab, eos_token_ids)
        proto = llg.LLMatcher(lltok, grammar, log_level=0)
        if proto.is_error():
            raise FastForwardError(f"invalid {LABELS[kind]}: {proto.get_error().splitlines()[0]}")
        return Constraint(kind, spec, grammar, proto, vocab)

    def matcher(self) -> Matcher:
        return Matcher(self._proto.deep_copy(), self.vocab)


_TOKENIZERS: dict[tuple[int, int, tuple[int, ...]], Any] = {}


def llg_tokenizer(tokenizer: Any, vocab: int, eos_token_ids: tuple[int, ...]) -> Any:
    """The llguidance view of a transformers fast tokenizer (~0.5 s to build, so kept per tokenizer)."""
    llg = _llguidance()
    if isinstance(tokenizer, llg.LLTokenizer):
        return tokenizer
    key = (id(tokenizer), vocab, tuple(eos_token_ids))
    if key not in _TOKENIZERS:
        from llguidance.hf import from_tokenizer

        eos = list(eos_token_ids) or None
        try:
            _TOKENIZERS[key] = from_tokenizer(tokenizer, n_vocab=vocab, eos_token=eos)
        except ValueError as e:
            raise FastForwardError(f"structured output needs a fast (Rust) tokenizer: {e}") from None
    return _TOKENIZERS[key]


class Matcher:
    """One request's grammar state: advanced by committed tokens only (:meth:`advance`); the tree walks of
    :meth:`mask_tree` and :meth:`prune` consume and roll back, leaving it as they found it.

    Counts its work for the stats: masks computed and their seconds."""

    def __init__(self, inner: Any, vocab: int) -> None:
        self.inner, self.vocab = inner, vocab
        self.masks = 0
        self.mask_s = 0.0
        self.forced_tokens = 0  # jump-forward tokens proposed
        self.forced_accepted = 0

    # ------------------------------------------------------------------ state

    @property
    def complete(self) -> bool:
        """The grammar is satisfied and allows nothing more (only EOS could follow)."""
        return self.inner.is_stopped() and not self.inner.is_error()

    def _check(self) -> None:
        if self.inner.is_error():
            raise FastForwardError(f"constraint violated: {self.inner.get_error().splitlines()[0]}")

    def advance(self, tokens: list[int]) -> int:
        """Consume committed tokens; returns how many were consumed before the grammar completed (the rest
        must be cut). A token the grammar forbids is a bug in the caller: raised, never silently kept."""
        for i, t in enumerate(tokens):
            if self.complete:
                return i
            if not self.inner.consume_token(int(t)):
                self._check()
                raise FastForwardError(f"constraint violated by token {t}")
        self._check()
        return len(tokens)

    def forced(self, limit: int) -> list[int]:
        """The tokens the grammar forces next (jump-forward), at most ``limit``."""
        if limit <= 0 or self.complete:
            return []
        return [int(t) for t in self.inner.compute_ff_tokens()[:limit]]

    def jump(self, room: int) -> list[int]:
        """This step's jump-forward draft: the forced tokens, at most :data:`JUMP_MAX` and ``room`` (tokens the
        request may still take after the anchor's successor); counted as proposed."""
        forced = self.forced(min(JUMP_MAX, room))
        self.forced_tokens += len(forced)
        return forced

    # ------------------------------------------------------------------ masks

    def allowed(self) -> torch.Tensor:
        """Bool [vocab]: the tokens the grammar allows next."""
        t0 = time.perf_counter()
        words = torch.frombuffer(bytearray(self.inner.compute_bitmask()), dtype=torch.int32)
        bits = ((words.unsqueeze(1) >> _BITS) & 1).flatten().bool()
        out = torch.zeros(self.vocab, dtype=torch.bool)
        n = min(self.vocab, bits.numel())
        out[:n] = bits[:n]
        self.masks += 1
        self.mask_s += time.perf_counter() - t0
        return out

    def mask_row(self, logits: torch.Tensor) -> torch.Tensor:
        """``logits`` [V] with forbidden tokens at -inf, in place (also returned)."""
        allowed = self.allowed().to(logits.device)
        return logits.masked_fill_(~allowed[: logits.shape[-1]], float("-inf"))

    def mask_tree(self, tokens: list[int], parents: list[int], logits: torch.Tensor) -> None:
        """Mask, in place, ``logits`` [n, V] of a verify block (``tokens[0]`` the committed anchor, consumed
        already; ``parents[i] < i``): node i's row gets the grammar state after the path to node i. Rows
        below a guess the grammar forbids are left as they are (no acceptance reaches them)."""
        children = _children(parents)

        def visit(i: int) -> None:
            self.mask_row(logits[i])
            for c in children[i]:
                if self.inner.try_consume_tokens([int(tokens[c])]) == 1:
                    visit(c)
                    self.inner.rollback(1)

        visit(0)

    def valid_prefix(self, tokens: list[int]) -> int:
        """How many of a guessed chain's tokens the grammar allows in a row."""
        return int(self.inner.validate_tokens([int(t) for t in tokens])) if tokens else 0

    def prune(self, tokens: list[int], parents: list[int]) -> list[int]:
        """The nodes of a guessed tree (``parents`` index ``tokens``, -1 = the anchor) whose whole path the
        grammar allows, in order: a subtree below a forbidden guess goes with it."""
        children = _children([-1, *(p + 1 for p in parents)])
        keep: list[int] = []

        def visit(i: int) -> None:
            for c in children[i]:
                if self.inner.try_consume_tokens([int(tokens[c - 1])]) == 1:
                    keep.append(c - 1)
                    visit(c)
                    self.inner.rollback(1)

        visit(0)
        return sorted(keep)

    def extras(self) -> dict[str, Any]:
        return {
            "constraint_masks": self.masks,
            "constraint_mask_s": self.mask_s,
            "jump_forward_proposed": self.forced_tokens,
            "jump_forward_accepted": self.forced_accepted,
        }


def _children(parents: list[int]) -> list[list[int]]:
    kids: list[list[int]] = [[] for _ in parents]
    for i, p in enumerate(parents):
        if p >= 0:
            kids[p].append(i)
    return kids


def subtree(tokens: list[int], parents: list[int], keep: list[int]) -> tuple[list[int], list[int]]:
    """The guessed tree restricted to ``keep`` (sorted node indices, closed under parents), re-indexed."""
    index = {old: new for new, old in enumerate(keep)}
    return [tokens[i] for i in keep], [index[parents[i]] if parents[i] >= 0 else -1 for i in keep]

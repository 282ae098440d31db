"""Lookahead decoding (Fu et al. 2024): a Jacobi window proposes n-grams, a pool keeps them, and the target
verifies pooled n-grams in the same forward that advances the window. Exact greedy.

One forward feeds, after the cached prefix:
- the *anchor* (last committed token, position P);
- the *lookahead branch*: R <= N-1 rows of W tokens, the last R Jacobi iterates of a window; the token in
  row r, column i sits at position P + 1 + r + i and sees the anchor, row 0 up to column i and its own
  column in rows 1..r (so each column plus the new output is a plausible N-gram);
- the *verification branch*: up to G pooled (N-1)-token continuations of the anchor, each a causal chain.
All of it is one tree (every token sees its ancestors), so :func:`tree_visibility` gives the 4D mask and the
tree depths the position ids. The longest verified candidate plus one bonus token (the target's argmax
after it) is committed; only the KV of the anchor and the accepted candidate tokens is kept.

Sampling (temperature > 0) stays lossless in distribution: the pooled candidates are point-mass drafts,
judged by recursive rejection sampling over their prefix tree (:func:`accept_tree_sampled`); the window
keeps proposing from the target's argmax, which only affects how often candidates are accepted.

*Step gate* (``gate=auto``, the default; :mod:`fastforward.core.pacing`): the decoder times its lookahead
steps (judged on bursts of N+2, long enough for the window to fill) against plain AR steps (the anchor alone; window and pool wait unchanged) and takes AR steps while they
give more tokens per ms, probing again after a back-off, so where a wide forward costs several narrow ones
(bf16 on an AVX2-only CPU) lookahead runs at about AR speed rather than below it. Greedy output is the same
under any schedule; seeded sampling keeps the gate off (its schedule would follow measured times). Built by
:func:`build`, the gate knows the full step's cost in AR steps from the machine's cost curve and defers its
opening burst by :func:`~fastforward.core.pacing.opening_wait` where that is several. Stats add
``gate_ar_steps`` and ``gate_probes``. ``output_ngrams`` (default on) also pools the n-grams the committed
output completes, so text that repeats itself is verified from the pool during AR stretches too.

Defaults are sized for a CPU in bfloat16, where a forward over ~25 tokens costs ~1.3-1.8x a one-token
forward (docs/results/jacobi_lookahead.md); the paper's GPU settings (W=15, N=5, G=15) cost far more here.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from fastforward.core.batching import Draft, Proposer, ProposerDecoder, Row, Verified
from fastforward.core.options import build_config, check_config, opt
from fastforward.core.pacing import GATE_HELP, GATES, StepCost, StepGate, row_policy
from fastforward.models.costs import step_ratio


@dataclass(frozen=True)
class LookaheadConfig:
    window: int = opt(4, min=1, help="W: columns of the Jacobi window")
    ngram: int = opt(4, min=2, help="N: n-gram size (the window keeps N-1 rows)")
    candidates: int = opt(4, min=1, help="G: most pooled n-grams verified per step")
    pool_size: int = opt(4096, min=1, help="most distinct first tokens kept in the n-gram pool (LRU)")
    prompt_ngrams: bool = opt(True, help="seed the n-gram pool with the prompt's n-grams")
    output_ngrams: bool = opt(
        True,
        help="pool the n-grams the committed output completes, every step (repeated text is then verified from the pool, as prompt lookup would)",
    )
    seed: int = opt(0, help="seed of the random initial guess (every generation restarts from it)")
    gate: str = opt("auto", choices=GATES, help=GATE_HELP)


ALIASES = {"W": "window", "N": "ngram", "G": "candidates"}


class NGramPool:
    """n-grams keyed by their first token; each key keeps its ``per_key`` most recent continuations and the
    pool its ``max_keys`` most recently used keys (LRU)."""

    def __init__(self, max_keys: int, per_key: int) -> None:
        self.max_keys, self.per_key = max_keys, per_key
        self._pool: OrderedDict[int, OrderedDict[tuple[int, ...], None]] = OrderedDict()

    def __len__(self) -> int:
        return sum(len(b) for b in self._pool.values())

    def add(self, ngram: Sequence[int]) -> None:
        key, cont = int(ngram[0]), tuple(int(t) for t in ngram[1:])
        bucket = self._pool.setdefault(key, OrderedDict())
        bucket[cont] = None
        bucket.move_to_end(cont)
        while len(bucket) > self.per_key:
            bucket.popitem(last=False)
        self._pool.move_to_end(key)
        while len(self._pool) > self.max_keys:
            self._pool.popitem(last=False)

    def candidates(self, token: int, k: int) -> list[tuple[int, ...]]:
        """Up to ``k`` continuations of ``token``, most recent first."""
        bucket = self._pool.get(int(token))
        if not bucket:
            return []
        self._pool.move_to_end(int(token))
        return list(reversed(bucket))[:k]


def step_layout(rows: int, width: int, cands: int, cand_len: int) -> list[int]:
    """Parents of the tokens of one step: anchor, lookahead rows (row-major), then candidate chains."""
    parents = [-1]

    def at(r: int, i: int) -> int:
        return 1 + r * width + i

    for r in range(rows):
        for i in range(width):
            parents.append((0 if i == 0 else at(0, i - 1)) if r == 0 else at(r - 1, i))
    base = 1 + rows * width
    for g in range(cands):
        for k in range(cand_len):
            parents.append(0 if k == 0 else base + g * cand_len + k - 1)
    return parents


def window_ngrams(rows: Sequence[Sequence[int]], last_out: Sequence[int]) -> list[list[int]]:
    """One n-gram per column: the column top to bottom, then the target's output after its last row."""
    return [[row[i] for row in rows] + [int(last_out[i])] for i in range(len(last_out))]


def add_output_ngrams(
    pool: NGramPool, prompt: Sequence[int], tokens: Sequence[int], new: int, n: int
) -> None:
    """Pool the n-grams that end at the ``new`` newest committed tokens (prompt + output as one text): text
    that repeats itself is then verified from the pool, as prompt lookup would, also while the gate runs AR
    steps and the window makes no n-grams."""
    for end in range(len(tokens) - new + 1, len(tokens) + 1):
        start = end - n
        gram = list(prompt[start:] if start < 0 else []) + list(tokens[max(start, 0) : end])
        if start >= -len(prompt) and len(gram) == n:
            pool.add(gram)


class LookaheadDecoder(ProposerDecoder):
    name = "lookahead"
    lossless = True

    def __init__(
        self, model: torch.nn.Module, config: LookaheadConfig | None = None, ratio: float = 0.0
    ) -> None:
        """``ratio``: a full step's cost over an AR step's from the machine's cost curve (0: not known),
        which defers the gate's opening burst where the step costs several AR steps (core.pacing)."""
        super().__init__(model)
        self.config = check_config(config or LookaheadConfig(), self.name)
        self._layouts: dict[tuple[int, int], list[int]] = {}
        # shared by this decoder's requests (core.pacing); judged on bursts long enough for the window to
        # fill its N-1 rows and yield n-grams
        self.gate = StepGate(burst=max(4, self.config.ngram + 2), ratio=ratio)

    def reopen_estimates(self) -> None:
        self.gate.reopen()

    def _layout(self, rows: int, cands: int) -> list[int]:
        """The step's tree (parents of anchor, window rows and candidates), built once per shape."""
        key = (rows, cands)
        if key not in self._layouts:
            c = self.config
            self._layouts[key] = step_layout(rows, c.window, cands, c.ngram - 1)
        return self._layouts[key]

    def proposer(self, solo: bool) -> LookaheadProposer:
        return LookaheadProposer(self, solo)


class _LookaheadRow:
    """One request's lookahead state: its n-gram pool, Jacobi window, step gate and counters, and what this
    step fed (read back by ``observe``)."""

    def __init__(self, config: LookaheadConfig, prompt: list[int], gate: StepGate) -> None:
        self.prompt = prompt
        self.pool = NGramPool(config.pool_size, config.candidates)
        if config.prompt_ngrams:
            for i in range(len(prompt) - config.ngram + 1):
                self.pool.add(prompt[i : i + config.ngram])
        self.rows = [random.Random(config.seed).choices(prompt, k=config.window)]
        self.gate = gate
        self.ex = dict(steps=0, pool_hits=0, accepted_from_pool=0, candidates_verified=0, forward_tokens=0)
        self.hist: list[int] = []
        self.step: tuple[bool, int, int] = (False, 0, 0)  # parallel?, candidates fed, committed before


class LookaheadProposer(Proposer):
    """Lookahead per row: the draft is the row's Jacobi window (fed for its outputs only, never judged:
    :attr:`Draft.context`) and up to G pooled n-grams continuing the anchor, the guesses the rule judges.
    The step gate (``gate=auto``) times the row's steps only when it decodes alone (batch 1), never under a
    seed; in a batch every row takes lookahead steps (a batch forward's time is shared by its rows)."""

    name = "lookahead"

    def __init__(self, decoder: LookaheadDecoder, solo: bool) -> None:
        self.decoder, self.solo = decoder, solo

    def admit(self, row: Row, prefill: Any) -> None:
        c = self.decoder.config
        shared = self.decoder.gate if c.gate == "auto" else None
        gate = row_policy(self.solo, row.run.config.sampling, shared, lambda: StepGate(enabled=False))
        row.state = _LookaheadRow(c, row.request.prompt, gate)

    def propose(self, rows: Sequence[Row]) -> list[Draft]:
        c = self.decoder.config
        drafts = []
        for row in rows:
            st: _LookaheadRow = row.state
            if not st.gate.choose(1):  # an AR step: the anchor alone; window and pool wait
                st.step = (False, 0, len(row.run.tokens))
                drafts.append(Draft())
                continue
            cands = st.pool.candidates(row.anchor, c.candidates)
            flat = [t for r in st.rows for t in r] + [t for cand in cands for t in cand]
            parents = self.decoder._layout(len(st.rows), len(cands))
            st.step = (True, len(cands), len(row.run.tokens))
            drafts.append(Draft.below([row.anchor, *flat], parents, context=len(st.rows) * c.window))
        return drafts

    def observe(
        self, rows: Sequence[Row], drafts: Sequence[Draft], paths: Sequence[list[int]], out: Verified
    ) -> None:
        c = self.decoder.config
        for b, (row, draft, path) in enumerate(zip(rows, drafts, paths, strict=True)):
            st: _LookaheadRow = row.state
            parallel, n_cands, before = st.step
            tokens = row.run.tokens
            kept = len(tokens) - before
            if c.output_ngrams:
                add_output_ngrams(st.pool, st.prompt, tokens, kept, c.ngram)
            if not parallel:
                st.gate.observe(StepCost(0, 0, out.propose_ms, out.verify_ms))
                continue
            base = 1 + draft.context  # block index of the first candidate token
            last_out = out.argmax[b][base - c.window : base]  # outputs of the window's last row
            if len(st.rows) == c.ngram - 1:
                for ng in window_ngrams(st.rows, last_out):
                    st.pool.add(ng)
                st.rows = st.rows[1:] + [last_out]
            else:
                st.rows.append(last_out)
            accepted = len(path) - 1
            st.ex["steps"] += 1
            st.ex["pool_hits"] += int(n_cands > 0)
            st.ex["accepted_from_pool"] += accepted
            st.ex["candidates_verified"] += n_cands
            st.ex["forward_tokens"] += len(draft.tokens) + 1
            st.hist.extend([0] * (kept + 1 - len(st.hist)))
            st.hist[kept] += 1
            fed = len(draft.tokens) + 1  # the anchor, the window (context) and the candidates (guesses)
            st.gate.observe(StepCost(fed - 1 - draft.context, accepted, out.propose_ms, out.verify_ms, fed))

    def row_extras(self, row: Row) -> dict[str, Any]:
        st: _LookaheadRow | None = row.state
        if st is None:
            extras: dict[str, Any] = dict(
                steps=0, pool_hits=0, accepted_from_pool=0, candidates_verified=0, forward_tokens=0
            )
            return {**extras, "accepted_hist": []}
        extras = {**st.ex, "accepted_hist": st.hist}  # accepted_hist[k]: steps that committed k tokens
        if st.gate.enabled:
            extras.update(st.gate.extras())
        return extras


def step_width(config: LookaheadConfig) -> int:
    """Tokens a full lookahead step feeds: the anchor, N-1 window rows of W and G candidates of N-1."""
    return 1 + (config.ngram - 1) * (config.window + config.candidates)


def build(name: str, target, draft, options: dict) -> LookaheadDecoder:
    config = build_config(LookaheadConfig, options, name, ALIASES)
    ratio = step_ratio(target, step_width(config)) if config.gate == "auto" else 0.0
    return LookaheadDecoder(target.model, config, ratio)


OPTIONS = LookaheadConfig

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
under any schedule; seeded sampling keeps the gate off (its schedule would follow measured times). Stats add
``gate_ar_steps`` and ``gate_probes``. ``output_ngrams`` (default on) also pools the n-grams the committed
output completes, so text that repeats itself is verified from the pool during AR stretches too.

Defaults are sized for a CPU in bfloat16, where a forward over ~25 tokens costs ~1.3-1.8x a one-token
forward (docs/results/jacobi_lookahead.md); the paper's GPU settings (W=15, N=5, G=15) cost far more here.
"""

from __future__ import annotations

import random
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from fastforward.core.acceptance import EXACT, fan_parents
from fastforward.core.decoder import Decoder, Run
from fastforward.core.engine import Block
from fastforward.core.options import build_config, check_config, opt
from fastforward.core.pacing import GATE_HELP, GATES, StepGate
from fastforward.core.sampling import make_generator, select_token


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


class LookaheadDecoder(Decoder):
    name = "lookahead"
    lossless = True

    def __init__(self, model: torch.nn.Module, config: LookaheadConfig | None = None) -> None:
        super().__init__(model)
        self.config = check_config(config or LookaheadConfig(), self.name)
        self._layouts: dict[tuple[int, int], list[int]] = {}
        # shared by this decoder's requests (core.pacing); judged on bursts long enough for the window to
        # fill its N-1 rows and yield n-grams
        self.gate = StepGate(burst=max(4, self.config.ngram + 2))

    def reopen_estimates(self) -> None:
        self.gate.reopen()

    def _layout(self, rows: int, cands: int) -> list[int]:
        """The step's tree (parents of anchor, window rows and candidates), built once per shape."""
        key = (rows, cands)
        if key not in self._layouts:
            c = self.config
            self._layouts[key] = step_layout(rows, c.window, cands, c.ngram - 1)
        return self._layouts[key]

    def _generate(self, prompt_ids: torch.Tensor, run: Run) -> None:
        c, dev, sampling = self.config, self.device, run.config.sampling
        gen = make_generator(sampling, dev)
        prompt = prompt_ids[0].tolist()
        pool = NGramPool(c.pool_size, c.candidates)
        if c.prompt_ngrams:
            for i in range(len(prompt) - c.ngram + 1):
                pool.add(prompt[i : i + c.ngram])
        rows = [random.Random(c.seed).choices(prompt, k=c.window)]

        engine, out = self.prefill(prompt_ids, run)
        run.commit([int(select_token(out.logits[0, -1], sampling, gen))])
        tokens = run.tokens
        ex = dict(steps=0, pool_hits=0, accepted_from_pool=0, candidates_verified=0, forward_tokens=0)
        hist: list[int] = []
        gate = self.gate.begin() if c.gate == "auto" and not sampling.seeded else StepGate(enabled=False)
        while not run.done:
            t_step = time.perf_counter()
            if not gate.parallel():  # an AR step: the anchor alone; window and pool wait
                logits = engine.forward([Block.chain(tokens[-1:])]).logits[0][-1]
                engine.keep([[0]])
                run.commit([int(select_token(logits, sampling, gen))])
                if c.output_ngrams:
                    add_output_ngrams(pool, prompt, tokens, 1, c.ngram)
                gate.observe(False, 1, (time.perf_counter() - t_step) * 1e3)
                continue
            cands = pool.candidates(tokens[-1], c.candidates)
            flat = [tokens[-1]] + [t for row in rows for t in row] + [t for cand in cands for t in cand]
            fwd = engine.forward([Block(flat, self._layout(len(rows), len(cands)))])
            logits = fwd.logits[0]  # [k, V]
            nxt = fwd.argmax[0]  # [k]
            base = 1 + len(rows) * c.window  # flat index of the first candidate token
            # the candidates as a tree of chains from the anchor: node j >= 1 is flat token base + j - 1
            cand_tokens, cand_parents = [tokens[-1], *flat[base:]], fan_parents([len(x) for x in cands])
            cand_logits = None if sampling.greedy else torch.cat([logits[:1], logits[base:]])
            verdict = EXACT.verify(
                cand_tokens, cand_parents, cand_logits, sampling, gen, argmax=nxt[:1] + nxt[base:]
            )
            accepted = [base + j - 1 for j in verdict.path[1:]]

            last_out = nxt[base - c.window : base]  # outputs of the window's last row
            if len(rows) == c.ngram - 1:
                for ng in window_ngrams(rows, last_out):
                    pool.add(ng)
                rows = rows[1:] + [last_out]
            else:
                rows.append(last_out)

            keep = run.commit([flat[i] for i in accepted] + [verdict.token], width=len(flat))
            if c.output_ngrams:
                add_output_ngrams(pool, prompt, tokens, len(keep), c.ngram)
            engine.keep([[0, *accepted]])

            ex["steps"] += 1
            ex["pool_hits"] += int(bool(cands))
            ex["accepted_from_pool"] += len(accepted)
            ex["candidates_verified"] += len(cands)
            ex["forward_tokens"] += len(flat)
            hist.extend([0] * (len(keep) + 1 - len(hist)))
            hist[len(keep)] += 1
            gate.observe(True, 1 + len(accepted), (time.perf_counter() - t_step) * 1e3)
        run.stats.extras.update(ex, accepted_hist=hist)  # accepted_hist[k]: steps that committed k tokens
        if gate.enabled:
            run.stats.extras.update(gate.extras())


def build(name: str, target, draft, options: dict) -> LookaheadDecoder:
    return LookaheadDecoder(target.model, build_config(LookaheadConfig, options, name, ALIASES))


OPTIONS = LookaheadConfig

"""Jacobi decoding with a KV cache (CLLM, Algorithm 3) and the trajectory measures of CLLM section 3.3.

Vocabulary. The *anchor* is the last committed token (its key/value not yet cached, like the token AR feeds
next). A *block* is the next n positions after it; an *iterate* is a guess for all n of them. One target
forward over ``[anchor, guess_1 .. guess_{m-1}]`` (the m not yet converged positions, at explicit position
ids, the converged prefix in the KV cache) gives the next iterate: output i is the argmax given the committed
tokens and the guesses before it. Output 0 is always right (it sees committed tokens only), and output i+1 is
right whenever guesses 1..i equalled their new values, so when the first k guesses are unchanged, k + 1
tokens are known to equal the *fixed point* (the greedy AR tokens): they are committed and the KV of the
others is cropped. A block is done when all n positions are committed; the next block starts from the last
argmax as its anchor.

Trajectory measures (pure functions below, shared with the CLLM trajectory collector):
- *fast-forwarded tokens* of an iteration: how far it extends the prefix that equals the fixed point; it
  includes the one token AR would also get, so plain LLMs score ~1.0-1.1 (CLLM Table 3);
- *stationary tokens* of a block: positions that became right and stayed unchanged while an earlier
  token was still wrong.

Sampling (temperature > 0) stays lossless in distribution: the previous iterate is a point-mass draft of
the unconverged positions, judged by rejection sampling along the chain (:class:`~fastforward.core.acceptance.ExactRule`); the
accepted guesses plus the target's draw after them are committed, and the remaining positions are re-guessed
with the target's argmax there. The trajectory measures then count against the committed (sampled) tokens.

Two options (Jacobi Forcing, arXiv:2512.14681 section 4; off by default, where the loop is the plain one
above, forward for forward). Both only change what is *fed*; acceptance is the one tree rule of
:mod:`fastforward.core.acceptance`, so greedy stays token-for-token AR and sampling stays lossless in
distribution with any model (base, CLLM- or Jacobi-Forcing-trained):

- *Rejection recycling* (``pool_size`` > 0): a FIFO pool keeps the sequences a forward threw away (the fed
  state, anchor first, and the target's outputs along the accepted branch), ``POOL_DEPTH * pool_size``
  of them. Each step, up to ``pool_size`` pooled continuations of the anchor (the tokens after its first
  occurrence in an entry, newest entry first, cropped to the fed guess length) join the guess as branches
  of one prefix tree rooted at the anchor (a candidate's tokens shared with an earlier branch are fed once;
  one that adds nothing is dropped), verified in the same forward under a 4D tree mask. Only the accepted
  path's KV is kept; the next guess continues from the target's outputs along the accepted branch.
- *Multi-block decoding* (``max_blocks`` K > 1, ``spawn_ratio`` r): the block being committed is the real
  active one (RA). When the newest block has settled ceil(r * n) tokens (RA: committed; a pseudo block:
  leading tokens its last forward left unchanged) and fewer than K blocks are live, a pseudo block of n
  more positions (initialised by ``init``) is appended (a configuration where ceil(r * n) >= n, which
  could never spawn, is refused). One causal chain feeds the anchor, RA's remaining
  guess and the pseudo blocks' guesses, so later blocks condition on RA's unverified draft; every forward
  refreshes every live block's iterate, acceptance is the chain's prefix match from the anchor (commits run
  on into the next block when RA completes, which then becomes RA with its refined guess), and live
  blocks never cover more positions than ``max_new_tokens`` leaves. ``blocks`` is an alias of ``max_blocks``
  on the command line (``--opt blocks=2``).

With either option the stats add ``tokens_fed`` (tokens fed to the target by decode forwards),
``pool_candidates`` (candidate branches fed), ``recycled_tokens`` (accepted tokens that only a candidate
branch held), ``recycle_steps`` (steps whose accepted path left the guess) and ``spawned_blocks``. The
trajectory measures need one block per forward: with ``max_blocks`` > 1 only ``blocks`` (blocks that
committed tokens) and ``iterations`` (decode forwards) are recorded; with recycling alone they are measured
on the iterates along the accepted branches.

*Step gate* (``gate=auto``, the default; :mod:`fastforward.core.pacing`): the decoder times its block steps
(judged on bursts of 4, estimates kept across its requests) against plain AR steps (the anchor alone fed; the guesses wait unchanged) and takes AR steps while they give
more tokens per ms, probing the block again after a back-off. On a CPU where a wide forward costs several
one-token forwards (bf16 on AVX2) Jacobi then runs at about AR speed instead of a fraction of it; where wide
forwards are nearly free it never leaves the block. Built as users build it (:func:`build`), the gate also
knows the block's cost in AR steps from the machine's cost curve and, where that is several, opens only after
enough AR steps that a losing opening stays within the probes' loss budget (:func:`~fastforward.core.pacing.opening_wait`).
Greedy output is the same under any schedule. It stays
off with ``max_blocks`` > 1, ``record=true`` and seeded sampling (see :func:`gate_on`); ``gate=off`` keeps
every step a block step. The stats add ``gate_ar_steps`` and ``gate_probes``.
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from fastforward.core.acceptance import common_prefix, fan_parents
from fastforward.core.batching import Draft, Proposer, ProposerDecoder, Row, Verified, pad_token
from fastforward.core.decoder import SamplingConfig
from fastforward.core.options import build_config, check_config, opt
from fastforward.core.pacing import GATE_HELP, GATES, StepCost, StepGate, row_policy
from fastforward.core.stats import DecodeStats
from fastforward.errors import FastForwardError
from fastforward.models.costs import step_ratio

INITS = ("random", "repeat", "pad")
POOL_DEPTH = 8  # recycling keeps POOL_DEPTH * pool_size sequences (2 pushed per rejecting step)

# --------------------------------------------------------------------------- pure functions


def converged_prefix(prev: Sequence[int], new: Sequence[int]) -> int:
    """How many leading tokens of ``new`` are certainly at the fixed point.

    ``prev`` is the previous iterate of the unconverged positions, ``new`` the iterate one forward computed
    from it. ``new[0]`` is always right; ``new[i]`` is right when ``prev[:i] == new[:i]``.
    """
    if not new:
        return 0
    return min(len(new), common_prefix(prev, new) + 1)


def next_iterate(first: int, outputs: Sequence[int], n: int) -> list[int]:
    """The iterate one forward over a state computes (CLLM eq. 3): the target's token after the committed
    prefix (``first``), then its argmax after each of the state's first n - 1 tokens (``outputs``)."""
    return [int(first)] + [int(t) for t in outputs[: n - 1]]


def converged_length(prev: Sequence[int], new: Sequence[int], m: int, eos: Sequence[int]) -> int:
    """Length of the fixed point when a state ``prev`` has converged (its next iterate ``new`` agrees with it
    on the m tokens that matter, or on a prefix ending with an EOS token), else 0. The trajectory collector's
    stopping rule: it iterates whole blocks instead of committing converged prefixes as they appear."""
    for i in range(m):
        if prev[i] != new[i]:
            return 0
        if new[i] in eos:
            return i + 1
    return m


def _fixed_point_span(iterates: Sequence[Sequence[int]], fixed_point: Sequence[int]) -> int:
    """Index of the first iterate equal to the fixed point (the last index when none is)."""
    fp = list(fixed_point)
    for j, it in enumerate(iterates):
        if list(it) == fp:
            return j
    return len(iterates) - 1


def fast_forward_counts(iterates: Sequence[Sequence[int]], fixed_point: Sequence[int]) -> list[int]:
    """Tokens each iteration adds to the prefix that equals the fixed point (CLLM's fast-forward count).

    ``iterates[0]`` is the initial guess; iterations run until the first iterate equal to the fixed point.
    Every count is >= 1 (it includes the token AR would get), and they sum to n minus the initial guess's
    correct prefix.
    """
    end = _fixed_point_span(iterates, fixed_point)
    lengths = [common_prefix(it, fixed_point) for it in iterates[: end + 1]]
    return [b - a for a, b in zip(lengths, lengths[1:], strict=False)]


def stationary_positions(iterates: Sequence[Sequence[int]], fixed_point: Sequence[int]) -> list[int]:
    """Positions that an iteration (not the initial guess alone) set to the fixed point and that stayed
    unchanged from then on, while an earlier position was still wrong (CLLM's stationary tokens)."""
    end = _fixed_point_span(iterates, fixed_point)
    its = [list(it) for it in iterates[: end + 1]]
    lengths = [common_prefix(it, fixed_point) for it in its]
    out: list[int] = []
    for i, want in enumerate(fixed_point):
        settle = None  # first iteration >= 1 from which position i stays right
        for j in range(len(its) - 1, 0, -1):
            if its[j][i] != want:
                break
            settle = j
        if settle is None:
            continue
        reached = next((j for j, n in enumerate(lengths) if n > i), len(its))
        if settle < reached:
            out.append(i)
    return out


def initial_guess(init: str, n: int, history: Sequence[int], rng: random.Random, pad_id: int) -> list[int]:
    """The block's iterate 0: tokens drawn from ``history`` (prompt + generated), the last token repeated,
    or the pad token."""
    if init == "random":
        return rng.choices(list(history), k=n)
    if init == "repeat":
        return [int(history[-1])] * n
    if init == "pad":
        return [pad_id] * n
    raise FastForwardError(f"jacobi: init must be one of {', '.join(INITS)}, got '{init}'")


def spawn_threshold(ratio: float, n: int) -> int:
    """Settled tokens of the newest block that let multi-block decoding spawn the next: ceil(r * n)."""
    return math.ceil(ratio * n - 1e-9)


def pool_continuations(pool: Iterable[Sequence[int]], anchor: int, length: int) -> Iterator[list[int]]:
    """Rejection recycling's candidates: for each pooled sequence that contains ``anchor`` (in the order
    given, newest first), the tokens after its first occurrence, at most ``length`` of them."""
    for entry in pool:
        try:
            i = list(entry).index(anchor)
        except ValueError:
            continue
        cont = [int(t) for t in entry[i + 1 : i + 1 + length]]
        if cont:
            yield cont


def guess_tree(
    anchor: int, guess: Sequence[int], candidates: Iterable[Sequence[int]], limit: int
) -> tuple[list[int], list[int], list[list[int]]]:
    """One step's token tree: the anchor (node 0), the fed guess as a chain (nodes 1..len(guess)), then up
    to ``limit`` candidate chains merged in as a prefix tree (tokens an earlier branch already holds under
    the same parent are not fed again; a candidate that adds no node is skipped and not counted).

    Returns (tokens, parents, branches): ``branches[b]`` lists branch b's nodes by depth, branch 0 the guess.
    """
    tokens, parents = [int(anchor), *(int(t) for t in guess)], fan_parents([len(guess)])
    child = {(parents[i], tokens[i]): i for i in range(1, len(tokens))}
    branches = [list(range(1, len(tokens)))]
    for cand in candidates:
        if len(branches) > limit:
            break
        node, nodes, added = 0, [], False
        for t in cand:
            nxt = child.get((node, int(t)))
            if nxt is None:
                nxt = child[(node, int(t))] = len(tokens)
                tokens.append(int(t))
                parents.append(node)
                added = True
            nodes.append(nxt)
            node = nxt
        if added:
            branches.append(nodes)
    return tokens, parents, branches


def branch_iterate(
    branches: Sequence[Sequence[int]], path: Sequence[int], outputs: Sequence[int]
) -> list[int]:
    """The next iterate of the L = len(branches[0]) + 1 positions after the anchor, read along the first
    branch that holds the accepted ``path`` (node indices from the root): the target's output at the
    root, then at each of the branch's nodes, continued with the guess branch's outputs where the branch is
    shorter. ``outputs[i]``: the target's token after node i (its argmax)."""
    a = len(path) - 1
    branch = next(b for b in branches if list(b[:a]) == list(path[1:]))
    main = branches[0]
    return [int(outputs[0])] + [
        int(outputs[(branch if d < len(branch) else main)[d]]) for d in range(len(main))
    ]


# --------------------------------------------------------------------------- decoder


@dataclass(frozen=True)
class JacobiConfig:
    block_size: int = opt(16, min=1, help="positions solved in parallel per block (n)")
    init: str = opt(
        "random",
        choices=INITS,
        help="initial guess of a block: random (prompt + output tokens, seeded), repeat or pad",
    )
    seed: int = opt(0, help="seed of the random initial guess (every generation restarts from it)")
    record: bool = opt(
        False, help="keep every iterate in decoder.last_trajectory (what `fastforward trace` draws)"
    )
    pool_size: int = opt(
        0,
        min=0,
        help="rejection recycling: most pooled rejected continuations of the anchor verified per step, as tree branches in the same forward (0 = off)",
    )
    max_blocks: int = opt(
        1,
        min=1,
        help="K: blocks in flight (multi-block decoding; pseudo blocks are guessed after the active block's unverified draft; 1 = off)",
    )
    spawn_ratio: float = opt(
        0.85,
        min=0.0,
        max=1.0,
        help="r: spawn a pseudo block once the newest block has ceil(r * block_size) settled tokens",
    )
    gate: str = opt("auto", choices=GATES, help=GATE_HELP)

    def validate(self) -> None:
        at = spawn_threshold(self.spawn_ratio, self.block_size)
        if self.max_blocks > 1 and at >= self.block_size:
            raise FastForwardError(
                f"jacobi: max_blocks={self.max_blocks} would never spawn a block: ceil(spawn_ratio * "
                f"block_size) = {at} is the whole block of {self.block_size}; lower spawn_ratio"
            )


ALIASES = {"blocks": "max_blocks"}


def gate_on(config: JacobiConfig, sampling: SamplingConfig) -> bool:
    """Whether a request runs under :class:`StepGate`: ``gate=auto`` with one block in flight (multi-block
    spawning reads how the pseudo blocks' guesses changed, which an AR step does not refresh), no recorded
    trajectories (they are training data for per-iteration measures), and no seeded sampling (the step
    schedule follows measured times, so the seed would not reproduce)."""
    return config.gate == "auto" and config.max_blocks == 1 and not config.record and not sampling.seeded


@dataclass
class BlockTrajectory:
    start: int  # index of the block's first position among the new tokens
    iterates: list[list[int]]  # [iterations + 1][n]; iterates[0] is the initial guess
    fixed_point: list[int]  # [n] (shorter when EOS or max_new_tokens ended the block)
    committed: list[int] = field(default_factory=list)  # tokens committed by each forward of the block


class JacobiDecoder(ProposerDecoder):
    name = "jacobi"
    lossless = True

    def __init__(
        self, model: torch.nn.Module, config: JacobiConfig | None = None, ratio: float = 0.0
    ) -> None:
        """``ratio``: a block step's cost over an AR step's from the machine's cost curve (0: not known),
        which defers the gate's opening burst where the block costs several AR steps (core.pacing)."""
        super().__init__(model)
        self.config = check_config(config or JacobiConfig(), self.name)
        self.pad_id = pad_token(model)  # what the pad init guesses
        self.last_trajectory: list[BlockTrajectory] = []
        self.gate = StepGate(ratio=ratio)  # shared by this decoder's requests (core.pacing)

    def reopen_estimates(self) -> None:
        self.gate.reopen()

    def proposer(self, solo: bool) -> JacobiProposer:
        return JacobiProposer(self, solo)

    def _block(self, start: int, n: int, history: list[int], rng: random.Random) -> _Live:
        guess = initial_guess(self.config.init, n, history, rng, self.pad_id)
        return _Live(BlockTrajectory(start=start, iterates=[list(guess)], fixed_point=[]), n)


class _JacobiRow:
    """One request's Jacobi state: its live blocks and their guesses, the recycling pool, the finished
    blocks' trajectories, its counters and step gate, and what this step fed (read back by ``observe``)."""

    def __init__(self, config: JacobiConfig, gate: StepGate) -> None:
        self.rng = random.Random(config.seed)
        self.pool: deque[list[int]] = deque(maxlen=POOL_DEPTH * config.pool_size)
        self.live: list[_Live] = []  # live[0] is the real-active block (RA), the others pseudo blocks
        self.guess: list[int] = []  # the live blocks' guesses for their uncommitted positions, in order
        self.done: list[BlockTrajectory] = []  # blocks that committed tokens, in order
        self.forwards = 0
        self.gate = gate
        self.ex = dict(tokens_fed=0, pool_candidates=0, recycled_tokens=0, recycle_steps=0, spawned_blocks=0)
        # this step: (the guess length L, parallel?, guesses fed, branches, committed tokens before it)
        self.step: tuple[int, bool, int, list[list[int]], int] = (0, False, 0, [], 0)


class JacobiProposer(Proposer):
    """Jacobi decoding per row: the guess of the row's live blocks (with rejection recycling's pooled
    branches as a tree, with multi-block's pseudo blocks appended) is the draft; the target's outputs after
    the accepted path are the next iterate. The step gate (``gate=auto``) times the row's steps only when it
    decodes alone (batch 1): in a batch every row takes block steps (a batch forward's time is shared, so
    no row's measured cost is its own), as with a seed."""

    name = "jacobi"

    def __init__(self, decoder: JacobiDecoder, solo: bool) -> None:
        self.decoder, self.solo = decoder, solo

    def _state(self, row: Row) -> _JacobiRow:
        c = self.decoder.config
        shared = self.decoder.gate if gate_on(c, row.run.config.sampling) else None
        return _JacobiRow(
            c, row_policy(self.solo, row.run.config.sampling, shared, lambda: StepGate(enabled=False))
        )

    def admit(self, row: Row, prefill: Any) -> None:
        row.state = self._state(row)

    def propose(self, rows: Sequence[Row]) -> list[Draft]:
        c, dec = self.decoder.config, self.decoder
        spawn_at = spawn_threshold(c.spawn_ratio, c.block_size)
        drafts = []
        for row in rows:
            st: _JacobiRow = row.state
            tokens, limit = row.run.tokens, row.run.config.max_new_tokens
            anchor = tokens[-1]
            if not st.live:  # a new RA block
                n = min(c.block_size, limit - len(tokens))
                st.live.append(dec._block(len(tokens), n, row.sequence, st.rng))
                st.guess = list(st.live[0].traj.iterates[0])
            room = limit - len(tokens) - len(st.guess)  # positions no live block covers
            live = st.live
            while len(live) < c.max_blocks and room > 0 and live[-1].settled(live[0]) >= spawn_at:
                blk = dec._block(len(tokens) + len(st.guess), min(c.block_size, room), row.sequence, st.rng)
                live.append(blk)
                st.guess += blk.traj.iterates[0]
                room -= blk.size
                st.ex["spawned_blocks"] += 1
            L = len(st.guess)  # positions after the anchor this step may commit (the last guess is not fed)
            par = st.gate.choose(1) > 0  # else an AR step, the anchor alone (the guesses wait unchanged)
            fed = L - 1 if par else 0
            cands = pool_continuations(reversed(st.pool), anchor, L - 1) if c.pool_size and par else ()
            flat, parents, branches = guess_tree(anchor, st.guess[:fed], cands, c.pool_size)
            st.step = (L, par, fed, branches, len(tokens))
            # the fed guesses and candidates are point-mass drafts (lossless in distribution when sampling)
            drafts.append(Draft.below(flat, parents))
        return drafts

    def observe(
        self, rows: Sequence[Row], drafts: Sequence[Draft], paths: Sequence[list[int]], out: Verified
    ) -> None:
        c = self.decoder.config
        for b, (row, draft, path) in enumerate(zip(rows, drafts, paths, strict=True)):
            st: _JacobiRow = row.state
            L, par, fed, branches, before = st.step
            guess, live = st.guess, st.live
            n_acc = len(path)  # tokens this forward committed (before the stops): accepted guesses + 1
            new = branch_iterate(branches, path, out.argmax[b])  # [fed + 1]
            new += guess[len(new) :]  # positions not fed keep their guess: [L]
            # every live block's new iterate, then the commit, which ran on from RA into the next blocks
            off = 0
            for blk in live:
                rem = blk.size - len(blk.traj.fixed_point)
                if blk is not live[0]:
                    blk.stable = common_prefix(guess[off : off + rem], new[off : off + rem])
                blk.traj.iterates.append(blk.traj.fixed_point + new[off : off + rem])
                off += rem
            rest = row.run.tokens[before:]
            for i, blk in enumerate(live):
                rem = blk.size - len(blk.traj.fixed_point)
                take, rest = rest[:rem], rest[rem:]
                if i == 0 or take:
                    blk.traj.fixed_point += take
                    blk.traj.committed.append(len(take))
            while live and len(live[0].traj.fixed_point) == live[0].size:
                st.done.append(live.pop(0).traj)
            if c.pool_size and par and n_acc < L:  # something was rejected: recycle state and outputs
                st.pool.append([row.run.tokens[before - 1], *guess])  # the state fed, anchor first
                st.pool.append(new)
            st.guess = new[n_acc:]
            st.forwards += 1
            st.ex["tokens_fed"] += len(draft.tokens) + 1
            st.ex["pool_candidates"] += len(branches) - 1
            recycled = sum(i > fed for i in path)
            st.ex["recycled_tokens"] += recycled
            st.ex["recycle_steps"] += int(recycled > 0)
            st.gate.observe(StepCost(fed, n_acc - 1, out.propose_ms, out.verify_ms))

    def row_extras(self, row: Row) -> dict[str, Any]:
        c, stats = self.decoder.config, row.run.stats
        st: _JacobiRow = row.state if row.state is not None else self._state(row)
        done = st.done + [blk.traj for blk in st.live if blk.traj.committed]
        if c.max_blocks > 1:  # a forward may commit into two blocks: no per-block iteration, no measures
            _record_blocks(stats, done, measures=False)
            stats.extras["iterations"] = st.forwards
        else:
            _record_blocks(stats, done, measures=row.run.config.sampling.greedy)
        extras: dict[str, Any] = {}
        if c.pool_size or c.max_blocks > 1:
            extras.update(st.ex)
        if st.gate.enabled:
            extras.update(st.gate.extras())
        self.decoder.last_trajectory = done if c.record else []
        return extras


@dataclass
class _Live:
    """A block in flight: its trajectory, size, and (pseudo blocks) how many leading tokens the last
    forward left unchanged."""

    traj: BlockTrajectory
    size: int
    stable: int = 0

    def settled(self, ra: _Live) -> int:
        return len(self.traj.fixed_point) if self is ra else self.stable


def block_measures(block: BlockTrajectory) -> tuple[list[int], list[int]]:
    """Fast-forward counts per iteration and stationary positions of one (possibly cut) block."""
    fp = block.fixed_point
    its = [it[: len(fp)] for it in block.iterates]
    return fast_forward_counts(its, fp), stationary_positions(its, fp)


def _record_blocks(stats: DecodeStats, blocks: list[BlockTrajectory], measures: bool = True) -> None:
    """Totals, so that sums over samples still give per-block and per-iteration averages.

    ``measures=False`` (sampling) records blocks and iterations only: sampled tokens are not a fixed point
    of the iterates, so fast-forward and stationary counts are undefined there."""
    ex = stats.extras
    ex.update(blocks=len(blocks), iterations=sum(len(b.committed) for b in blocks))
    if not measures:
        return
    ex.update(fixed_point_iterations=0, fast_forward_tokens=0, stationary_tokens=0)
    hist: list[int] = []
    for b in blocks:
        ff, st = block_measures(b)
        ex["fixed_point_iterations"] += len(ff)
        ex["fast_forward_tokens"] += sum(ff)
        ex["stationary_tokens"] += len(st)
        for f in ff:
            hist.extend([0] * (f + 1 - len(hist)))
            hist[f] += 1
    ex["fast_forward_hist"] = hist  # hist[k]: iterations that fast-forwarded k tokens


def build(name: str, target, draft, options: dict) -> JacobiDecoder:
    config = build_config(JacobiConfig, options, name, ALIASES)
    ratio = step_ratio(target, config.block_size) if config.gate == "auto" else 0.0
    return JacobiDecoder(target.model, config, ratio)


OPTIONS = JacobiConfig

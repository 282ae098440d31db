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
the unconverged positions, judged by rejection sampling along the chain (:func:`accept_tree_sampled`); the
accepted guesses plus the target's draw after them are committed, and the remaining positions are re-guessed
with the target's argmax there. The trajectory measures then count against the committed (sampled) tokens.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from fastforward.core.acceptance import accept_tree_sampled, chain_parents, common_prefix
from fastforward.core.cache import rollback, text_config
from fastforward.core.decoder import Decoder, Run
from fastforward.core.options import build_config, check_config, opt
from fastforward.core.sampling import make_generator, select_token
from fastforward.core.stats import DecodeStats
from fastforward.errors import FastForwardError

INITS = ("random", "repeat", "pad")

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


# --------------------------------------------------------------------------- decoder


@dataclass(frozen=True)
class JacobiConfig:
    block_size: int = opt(16, min=1)  # n: positions solved in parallel
    init: str = opt("random", choices=INITS)  # iterate 0: random (prompt + generated, seeded) | repeat | pad
    seed: int = 0  # seed of the random initialisation; every generate() call restarts from it
    record: bool = False  # keep every iterate of every block in decoder.last_trajectory


@dataclass
class BlockTrajectory:
    start: int  # index of the block's first position among the new tokens
    iterates: list[list[int]]  # [iterations + 1][n]; iterates[0] is the initial guess
    fixed_point: list[int]  # [n] (shorter when EOS or max_new_tokens ended the block)
    committed: list[int] = field(default_factory=list)  # tokens committed by each forward of the block


class JacobiDecoder(Decoder):
    name = "jacobi"
    lossless = True

    def __init__(self, model: torch.nn.Module, config: JacobiConfig | None = None) -> None:
        super().__init__(model)
        self.config = check_config(config or JacobiConfig(), self.name)
        cfg = text_config(model)
        pad = getattr(cfg, "pad_token_id", None)
        eos = getattr(cfg, "eos_token_id", None)
        eos = eos[0] if isinstance(eos, list) else eos
        self.pad_id = int(pad if pad is not None else eos if eos is not None else 0)
        self.last_trajectory: list[BlockTrajectory] = []

    def _generate(self, prompt_ids: torch.Tensor, run: Run) -> None:
        sampling = run.config.sampling
        gen = make_generator(sampling, self.device)
        rng = random.Random(self.config.seed)
        history = prompt_ids[0].tolist()
        cache, out = self.prefill(prompt_ids, run)
        run.commit([int(select_token(out.logits[0, -1], sampling, gen))])
        tokens = run.tokens
        anchor_pos = prompt_ids.shape[1]  # position of tokens[-1]; the cache holds everything before it
        blocks: list[BlockTrajectory] = []
        while not run.done:
            n = min(self.config.block_size, run.config.max_new_tokens - len(tokens))
            guess = initial_guess(self.config.init, n, history + tokens, rng, self.pad_id)
            block = BlockTrajectory(start=len(tokens), iterates=[list(guess)], fixed_point=[])
            while len(block.fixed_point) < n and not run.done:
                m = len(guess)  # unconverged positions
                feed = torch.tensor([[tokens[-1], *guess[: m - 1]]], device=self.device)
                pos = torch.arange(anchor_pos, anchor_pos + m, device=self.device)[None]
                out = self.model(input_ids=feed, position_ids=pos, past_key_values=cache, use_cache=True)
                new = out.logits[0].argmax(-1).tolist()  # [m]
                block.iterates.append(block.fixed_point + new)
                if sampling.greedy:
                    c = converged_prefix(guess, new)
                    step = new[:c]
                else:  # the guesses fed after the anchor are a point-mass draft chain
                    feed_ids = [tokens[-1], *guess[: m - 1]]
                    path, extra = accept_tree_sampled(
                        feed_ids, chain_parents([m - 1]), out.logits[0], sampling, gen
                    )
                    c = len(path)
                    step = feed_ids[1:c] + [extra]
                keep = run.commit(step)
                block.fixed_point += keep
                block.committed.append(len(keep))
                rollback(cache, anchor_pos + c)  # keep the anchor and the c - 1 right guesses
                anchor_pos += c
                guess = new[c:]
            blocks.append(block)
        _record_blocks(run.stats, blocks, measures=sampling.greedy)
        self.last_trajectory = blocks if self.config.record else []


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
    return JacobiDecoder(target.model, build_config(JacobiConfig, options, name))


OPTIONS = JacobiConfig

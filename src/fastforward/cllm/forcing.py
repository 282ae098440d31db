"""Jacobi Forcing training data (arXiv 2512.14681, section 3.2): noisy blocks in the context of earlier
*noisy* blocks, all blocks of one answer in one sequence.

Layout of one packed example (one forward, a 4D mask, explicit position ids)::

    prompt | k_0 l_0 | k_1 l_1 | ... | k_{T-1} l_{T-1}

``l_j`` is block j's fixed point (the model's own greedy tokens), ``k_j`` a noisy Jacobi state of the same
block picked by the cyclic noise schedule. ``k_j`` and ``l_j`` share position ids (P + j*n + i). Visibility:
the prompt is causal; ``k_j`` sees the prompt, every earlier *noisy* block and itself causally; ``l_j`` sees
the prompt, every earlier *clean* block and itself causally. So the logits at ``k_j`` are those of a plain
causal forward over ``[prompt, k_0 .. k_j]`` and the logits at ``l_j`` those over ``[prompt, l_0 .. l_j]``
(tested): the model learns to continue correctly after long unconverged spans, which is what it faces when
several blocks are in flight at inference.

Loss terms, as index lists into the packed logits (the trainer's :class:`PackedExample` contract):
- consistency: student = ``k_j`` at offsets t >= the block's first wrong position, teacher = ``l_j`` at the
  same offset (detached in the loss), weighted 1 / T (the reference divides the mean by the block count);
- AR: the clean chain predicts its next token: prompt end -> l_0[0], inside l_j, l_j[-1] -> l_{j+1}[0].

The noisy state of block j is the trajectory state whose noise ratio, (m - first_mismatch) / m, is nearest
``W[j mod w]`` with ``W = linspace(0, 1, w)`` (``progressive``; ``reverse`` runs the ramp downwards,
``random`` draws the target from W). Trajectories keep their random initial state y(0) (the reference loses
it), so ratio 1.0 exists whenever y(0) starts wrong.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import torch

from fastforward.cllm.packing import PackedExample
from fastforward.cllm.trajectories import TrajectoryRecord

STRATEGIES = ("progressive", "reverse", "random")


def first_mismatch(state: Sequence[int], fixed: Sequence[int]) -> int:
    """Index of the first position where ``state`` differs from ``fixed`` (len when none does)."""
    for i, (a, b) in enumerate(zip(state, fixed, strict=False)):
        if a != b:
            return i
    return min(len(state), len(fixed))


def noise_ratio(state: Sequence[int], fixed: Sequence[int]) -> float:
    """Fraction of the block from its first unconverged position on (the reference code's measure)."""
    m = len(fixed)
    return (m - first_mismatch(state, fixed)) / m if m else 0.0


def schedule_target(block_index: int, window: int, strategy: str, rng: random.Random) -> float:
    """The noise ratio block ``block_index`` should have: a linear ramp from clean (0) to fully noisy (1)
    over ``window`` consecutive blocks, repeated (cyclic), so no prediction sees more than ~a window of
    noisy context in a row."""
    if window < 1:
        raise ValueError("noise window must be >= 1")
    levels = [i / (window - 1) for i in range(window)] if window > 1 else [1.0]
    if strategy == "progressive":
        return levels[block_index % window]
    if strategy == "reverse":
        return levels[window - 1 - block_index % window]
    if strategy == "random":
        return rng.choice(levels)
    raise ValueError(f"unknown noise strategy '{strategy}'; choose one of {', '.join(STRATEGIES)}")


def pick_noisy_state(trajectory: Sequence[Sequence[int]], target: float) -> list[int]:
    """The state whose noise ratio is nearest ``target`` (the noisiest of equally near ones)."""
    fixed = trajectory[-1]
    best = min(range(len(trajectory)), key=lambda i: (abs(noise_ratio(trajectory[i], fixed) - target), i))
    return list(trajectory[best])


def forcing_visibility(prompt_len: int, block_lengths: Sequence[int]) -> torch.Tensor:
    """[L, L] bool, query row sees key column, for ``prompt, k_0, l_0, k_1, l_1, ...`` (noise-aware mask)."""
    total = prompt_len + 2 * sum(block_lengths)
    vis = torch.zeros(total, total, dtype=torch.bool)
    vis[:prompt_len, :prompt_len] = torch.ones(prompt_len, prompt_len).tril().bool()
    noisy: list[tuple[int, int]] = []
    clean: list[tuple[int, int]] = []
    start = prompt_len
    for m in block_lengths:
        tri = torch.ones(m, m).tril().bool()
        for spans, s in ((noisy, start), (clean, start + m)):
            vis[s : s + m, :prompt_len] = True
            for a, b in spans:
                vis[s : s + m, a:b] = True
            vis[s : s + m, s : s + m] = tri
            spans.append((s, s + m))
        start += 2 * m
    return vis


def chained_blocks(records: Sequence[TrajectoryRecord]) -> list[TrajectoryRecord]:
    """The prompt's blocks 0, 1, 2, ... as long as each continues the previous one (cleaning may have
    dropped a block; what follows a gap cannot be placed in the packed chain)."""
    out: list[TrajectoryRecord] = []
    for r in sorted(records, key=lambda r: r.block_index):
        if r.block_index != len(out):
            break
        if out and r.prompt_ids != out[-1].teacher_output_ids:
            break
        if not out and len(r.prompt_ids) != r.prompt_len:
            break
        out.append(r)
    return out


def pack_forcing(
    records: Sequence[TrajectoryRecord],
    rng: random.Random,
    window: int = 8,
    strategy: str = "progressive",
    max_tokens: int | None = None,
) -> PackedExample | None:
    """Pack one prompt's blocks as ``prompt, k_0, l_0, ...``; None if not even block 0 fits."""
    blocks = chained_blocks(records)
    if not blocks:
        return None
    prompt = list(blocks[0].prompt_ids)
    p = len(prompt)
    budget = max_tokens if max_tokens is not None else 1 << 30
    kept: list[TrajectoryRecord] = []
    used = p
    for r in blocks:
        m = len(r.fixed_point)
        if used + 2 * m > budget:
            break
        kept.append(r)
        used += 2 * m
    if not kept:
        return None

    tokens = list(prompt)
    positions = list(range(p))
    lengths = [len(r.fixed_point) for r in kept]
    weight = 1.0 / len(kept)
    student: list[int] = []
    teacher: list[int] = []
    ar_idx: list[int] = [p - 1]
    ar_tgt: list[int] = []
    base = p  # position id of the block's first token
    for j, r in enumerate(kept):
        fixed = list(r.fixed_point)
        m = len(fixed)
        noisy = pick_noisy_state(r.trajectory, schedule_target(j, window, strategy, rng))
        k0 = len(tokens)
        l0 = k0 + m
        tokens += noisy + fixed
        positions += [base + i for i in range(m)] * 2
        # offsets whose logits predict beyond an EOS say nothing: leave them out
        last = m - 1 if r.eos else m
        for t in range(first_mismatch(noisy, fixed), last):
            student.append(k0 + t)
            teacher.append(l0 + t)
        ar_tgt += fixed
        ar_idx += [l0 + i for i in range(m)]
        base += m
    ar_idx = ar_idx[: len(ar_tgt)]  # the last clean token predicts nothing we know

    def t(x: list[int]) -> torch.Tensor:
        return torch.tensor(x, dtype=torch.long)

    return PackedExample(
        input_ids=t(tokens),
        position_ids=t(positions),
        visible=forcing_visibility(p, lengths),
        student_idx=t(student),
        teacher_idx=t(teacher),
        ar_idx=t(ar_idx),
        ar_targets=t(ar_tgt),
        consistency_weight=weight,
    )

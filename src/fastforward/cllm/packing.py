"""Pack one prompt's training signal into one sequence: the affordable way to train a CLLM on a CPU.

Layout of a packed example (all in one forward, a 4D mask and explicit position ids)::

    [ main: prompt + fixed points of every kept block ]   causal; its logits give the AR loss on the teacher
                                                           output and, detached, the global-consistency teacher
    [ state of block b (tokens 0..m-2) ] x k per block     sees main[:P_b] (prompt + earlier fixed points) and
                                                           itself causally; positions P_b, P_b+1, ...
    [ next state of block b ]  (local loss only)           same, detached: the local-consistency teacher
    [ gold answer (tokens 0..L-2) ]  (--ar-target labels)  sees the prompt only

The last token of a state is never fed: its logit predicts beyond the block. The loss terms are index lists
into the packed logits (student index, teacher index, AR index and target), so the masks of eq. 4-6 become
"which positions are listed": positions before the first wrong token are left out, padding never appears.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from fastforward.cllm.losses import first_wrong_mask
from fastforward.cllm.trajectories import TrajectoryRecord


@dataclass
class PackedExample:
    input_ids: torch.Tensor  # [L]
    position_ids: torch.Tensor  # [L]
    visible: torch.Tensor  # [L, L] bool, query row sees key column
    student_idx: torch.Tensor  # [C] consistency student positions
    teacher_idx: torch.Tensor  # [C] consistency teacher positions (detached in the loss)
    ar_idx: torch.Tensor  # [A] positions whose logits predict ar_targets
    ar_targets: torch.Tensor  # [A]
    consistency_weight: float = 1.0  # scales this example's consistency terms (Jacobi Forcing: 1 / blocks)

    @property
    def length(self) -> int:
        return int(self.input_ids.shape[0])


class _Builder:
    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.positions: list[int] = []
        self.segments: list[tuple[int, int, int]] = []  # (start, length, main context length)

    def add(self, tokens: Sequence[int], first_position: int, context: int) -> int:
        start = len(self.tokens)
        self.tokens += list(tokens)
        self.positions += [first_position + i for i in range(len(tokens))]
        self.segments.append((start, len(tokens), context))
        return start

    def visible(self) -> torch.Tensor:
        n = len(self.tokens)
        vis = torch.zeros(n, n, dtype=torch.bool)
        for start, length, ctx in self.segments:
            vis[start : start + length, :ctx] = True
            vis[start : start + length, start : start + length] = torch.ones(length, length).tril().bool()
        return vis


def pack_prompt(
    records: Sequence[TrajectoryRecord],
    rng: random.Random,
    loss: str = "global",
    states_per_block: int = 2,
    ar_target: str = "teacher",
    max_tokens: int | None = None,
) -> PackedExample | None:
    """Pack the kept blocks of ONE prompt (sorted by block_index). None if nothing can be trained on."""
    if not records:
        return None
    records = sorted(records, key=lambda r: r.block_index)
    main = records[-1].teacher_output_ids
    for r in records:
        if main[: len(r.teacher_output_ids)] != r.teacher_output_ids:
            raise ValueError(f"{r.prompt_id}/{r.block_index}: blocks of one prompt do not chain")
    b = _Builder()
    b.add(main, 0, 0)
    student: list[int] = []
    teacher: list[int] = []
    ar_idx: list[int] = []
    ar_tgt: list[int] = []

    # AR loss on the teacher output: every kept fixed point, predicted from the main sequence
    if ar_target == "teacher":
        for r in records:
            p = len(r.prompt_ids)
            ar_idx += [p - 1 + i for i in range(len(r.fixed_point))]
            ar_tgt += r.fixed_point
    elif ar_target == "labels":
        answer = records[0].answer_ids
        if answer:
            plen = records[0].prompt_len
            start = b.add(answer[:-1], plen, plen) if len(answer) > 1 else -1
            ar_idx += [plen - 1] + [start + i for i in range(len(answer) - 1)]
            ar_tgt += list(answer)
    else:
        raise ValueError(f"unknown ar_target '{ar_target}'")

    budget = max_tokens if max_tokens is not None else 1 << 30
    for r in records:
        p, fixed = len(r.prompt_ids), r.fixed_point
        m = len(fixed)
        if m < 2 or len(r.trajectory) < 2:
            continue
        if loss == "global":
            candidates = [list(s) for s in r.trajectory[:-1]] + [list(s) for s in r.meta.get("augmented", [])]
            candidates = [s for s in candidates if any(first_wrong_mask(s, fixed))]
            picks = rng.sample(candidates, min(states_per_block, len(candidates)))
            pairs = [(s, None) for s in picks]
        elif loss == "local":
            js = [j for j in range(len(r.trajectory) - 1) if any(first_wrong_mask(r.trajectory[j], fixed))]
            picks = rng.sample(js, min(states_per_block, len(js)))
            pairs = [
                (r.trajectory[j], r.trajectory[j + 1] if j + 1 < len(r.trajectory) - 1 else None)
                for j in picks
            ]
        else:
            raise ValueError(f"unknown loss '{loss}'")
        for state, nxt in pairs:
            need = (m - 1) * (1 if nxt is None else 2)
            if len(b.tokens) + need > budget:
                break
            s0 = b.add(state[: m - 1], p, p)
            t0 = b.add(nxt[: m - 1], p, p) if nxt is not None else None
            for i, ok in enumerate(first_wrong_mask(state, fixed)):
                if not ok:
                    continue
                student.append(s0 + i - 1)
                teacher.append(p - 1 + i if t0 is None else t0 + i - 1)
    if not student and not ar_idx:
        return None

    def t(x: list[int]) -> torch.Tensor:
        return torch.tensor(x, dtype=torch.long)

    return PackedExample(
        input_ids=t(b.tokens),
        position_ids=t(b.positions),
        visible=b.visible(),
        student_idx=t(student),
        teacher_idx=t(teacher),
        ar_idx=t(ar_idx),
        ar_targets=t(ar_tgt),
    )


def collate(examples: Sequence[PackedExample], dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    """Right-pad packed examples into a batch; indices become flat indices into [B * L] logits."""
    length = max(e.length for e in examples)
    bsz = len(examples)
    ids = torch.zeros(bsz, length, dtype=torch.long)
    pos = torch.zeros(bsz, length, dtype=torch.long)
    vis = torch.eye(length, dtype=torch.bool).expand(bsz, length, length).clone()  # pad rows see themselves
    out: dict[str, list[torch.Tensor]] = {
        k: [] for k in ("student_idx", "teacher_idx", "ar_idx", "ar_targets", "student_weight")
    }
    for i, e in enumerate(examples):
        n = e.length
        ids[i, :n], pos[i, :n], vis[i, :n, :n] = e.input_ids, e.position_ids, e.visible
        off = i * length
        out["student_idx"].append(e.student_idx + off)
        out["teacher_idx"].append(e.teacher_idx + off)
        out["ar_idx"].append(e.ar_idx + off)
        out["ar_targets"].append(e.ar_targets)
        out["student_weight"].append(torch.full((e.student_idx.numel(),), float(e.consistency_weight)))
    mask = torch.zeros(bsz, 1, length, length, dtype=dtype).masked_fill_(
        ~vis[:, None], torch.finfo(dtype).min
    )
    batch = {k: torch.cat(v) for k, v in out.items()}
    batch.update(input_ids=ids, position_ids=pos, attention_mask=mask)
    return batch

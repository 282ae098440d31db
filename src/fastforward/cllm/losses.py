"""CLLM losses as pure functions of logits (paper eq. 4-7).

Consistency: ``D(q_teacher || q_student)`` per position, where the teacher logits are the model's own
logits with the stop-gradient applied *here* (eq. 4: on the fixed point, global; eq. 5: on the next state,
local). Distances: forward KL (the paper's default), reverse KL, Jensen-Shannon (beta = 1/2).
Positions are masked where the student's context equals the fixed point's (before and at the first wrong
token: there the distance is 0 and only dilutes the mean) and at padding, as in the reference trainer.

AR (eq. 6): cross-entropy on the teacher's output or on ground-truth labels, label smoothing as in the
reference (0.1). Total (eq. 7): consistency + w * AR.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

DISTANCES = ("fkl", "rkl", "js")


def distance(teacher_logits: torch.Tensor, student_logits: torch.Tensor, kind: str = "fkl") -> torch.Tensor:
    """Per-position divergence [..., V] x [..., V] -> [...]; the teacher side carries no gradient."""
    t = F.log_softmax(teacher_logits.detach().float(), dim=-1)
    s = F.log_softmax(student_logits.float(), dim=-1)
    if kind == "fkl":  # KL(teacher || student)
        return (t.exp() * (t - s)).sum(-1)
    if kind == "rkl":  # KL(student || teacher)
        return (s.exp() * (s - t)).sum(-1)
    if kind == "js":
        m = torch.logsumexp(torch.stack([t, s]), dim=0) - torch.log(torch.tensor(2.0))
        return 0.5 * (t.exp() * (t - m)).sum(-1) + 0.5 * (s.exp() * (s - m)).sum(-1)
    raise ValueError(f"unknown distance '{kind}'; choose one of {', '.join(DISTANCES)}")


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``values`` where ``mask`` is True; 0 (still attached to the graph) when nothing is valid."""
    mask = mask.to(values.device)
    n = mask.sum()
    total = (values * mask).sum()
    return total / n.clamp(min=1)


def consistency_loss(
    student_logits: torch.Tensor,  # [..., V]
    teacher_logits: torch.Tensor,  # [..., V], detached inside
    mask: torch.Tensor,  # [...] bool: positions that count
    kind: str = "fkl",
    weights: torch.Tensor
    | None = None,  # [...] per-position scale (Jacobi Forcing: 1 / blocks of the example)
) -> torch.Tensor:
    d = distance(teacher_logits, student_logits, kind)
    if weights is not None:
        d = d * weights.to(d.device, d.dtype)
    return masked_mean(d, mask)


def first_wrong_mask(state: Sequence[int], fixed: Sequence[int], valid_len: int | None = None) -> list[bool]:
    """For each block position i, whether predicting token i counts: its context state[:i] differs from
    fixed[:i] (some earlier token is wrong) and i < valid_len (not padding). [m] bools."""
    m = len(state)
    valid_len = m if valid_len is None else valid_len
    out, wrong_seen = [], False
    for i in range(m):
        out.append(wrong_seen and i < valid_len)
        if i < len(fixed) and state[i] != fixed[i]:
            wrong_seen = True
    return out


def ar_loss(
    logits: torch.Tensor,  # [N, V]
    targets: torch.Tensor,  # [N]; -100 ignored
    label_smoothing: float = 0.1,
) -> torch.Tensor:
    if targets.numel() == 0 or bool((targets == -100).all()):
        return logits.sum() * 0.0
    return F.cross_entropy(logits.float(), targets, ignore_index=-100, label_smoothing=label_smoothing)


def total_loss(consistency: torch.Tensor, ar: torch.Tensor, ar_weight: float) -> torch.Tensor:
    """Eq. 7."""
    return consistency + ar_weight * ar

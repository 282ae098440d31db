"""CLLM losses on hand-made logits: distances, masks before the first wrong token and at padding, gradients."""

from __future__ import annotations

import pytest
import torch

from fastforward.cllm.losses import (
    ar_loss,
    consistency_loss,
    distance,
    first_wrong_mask,
    masked_mean,
    total_loss,
)


@pytest.mark.parametrize("kind", ["fkl", "rkl", "js"])
def test_distance_of_identical_distributions_is_zero(kind):
    x = torch.randn(5, 11)
    assert torch.allclose(distance(x, x.clone(), kind), torch.zeros(5), atol=1e-6)


@pytest.mark.parametrize("kind", ["fkl", "rkl", "js"])
def test_distance_positive_for_different_distributions(kind):
    torch.manual_seed(0)
    a, b = torch.randn(4, 7), torch.randn(4, 7)
    assert (distance(a, b, kind) > 1e-4).all()


def test_forward_and_reverse_kl_by_hand():
    p = torch.tensor([0.5, 0.5])
    q = torch.tensor([0.9, 0.1])
    fkl = (p * (p / q).log()).sum()
    rkl = (q * (q / p).log()).sum()
    assert torch.isclose(distance(p.log()[None], q.log()[None], "fkl")[0], fkl, atol=1e-6)
    assert torch.isclose(distance(p.log()[None], q.log()[None], "rkl")[0], rkl, atol=1e-6)
    # rkl(teacher, student) == fkl(student, teacher)
    assert torch.isclose(distance(q.log()[None], p.log()[None], "fkl")[0], rkl, atol=1e-6)


def test_js_symmetric_and_bounded():
    torch.manual_seed(1)
    a, b = torch.randn(6, 9) * 3, torch.randn(6, 9) * 3
    assert torch.allclose(distance(a, b, "js"), distance(b, a, "js"), atol=1e-6)
    assert (distance(a, b, "js") <= torch.log(torch.tensor(2.0)) + 1e-6).all()


def test_unknown_distance_raises():
    with pytest.raises(ValueError):
        distance(torch.zeros(1, 2), torch.zeros(1, 2), "l2")


@pytest.mark.parametrize("kind", ["fkl", "rkl", "js"])
def test_gradients_flow_only_to_the_student(kind):
    torch.manual_seed(2)
    teacher = torch.randn(3, 5, requires_grad=True)
    student = torch.randn(3, 5, requires_grad=True)
    consistency_loss(student, teacher, torch.ones(3, dtype=torch.bool), kind).backward()
    assert teacher.grad is None
    assert student.grad is not None and student.grad.abs().sum() > 0


def test_first_wrong_mask_masks_up_to_and_including_the_first_wrong_token():
    fixed = [1, 2, 3, 4, 5]
    # first wrong at index 2: predictions of tokens 0..2 see a correct context -> masked
    assert first_wrong_mask([1, 2, 9, 9, 5], fixed) == [False, False, False, True, True]
    assert first_wrong_mask([9, 2, 3, 4, 5], fixed) == [False, True, True, True, True]
    assert first_wrong_mask(fixed, fixed) == [False] * 5
    # padding: positions >= valid_len never count
    assert first_wrong_mask([9, 9, 9, 0, 0], fixed, valid_len=3) == [False, True, True, False, False]


def test_consistency_loss_ignores_masked_and_padding_positions():
    torch.manual_seed(3)
    teacher, student = torch.randn(4, 6), torch.randn(4, 6)
    mask = torch.tensor([False, True, True, False])
    expected = distance(teacher, student)[1:3].mean()
    assert torch.isclose(consistency_loss(student, teacher, mask), expected)
    garbage = student.clone()
    garbage[0] = 1e4  # changes at masked positions do not matter
    garbage[3] = -1e4
    assert torch.isclose(consistency_loss(garbage, teacher, mask), expected)


def test_consistency_loss_with_nothing_valid_is_zero_and_differentiable():
    student = torch.randn(2, 3, requires_grad=True)
    loss = consistency_loss(student, torch.randn(2, 3), torch.zeros(2, dtype=torch.bool))
    assert loss.item() == 0.0
    loss.backward()
    assert student.grad is not None


def test_masked_mean_batched_padding():
    v = torch.tensor([[1.0, 2.0, 100.0], [3.0, 100.0, 100.0]])
    m = torch.tensor([[True, True, False], [True, False, False]])
    assert masked_mean(v, m).item() == pytest.approx(2.0)


def test_ar_loss_is_cross_entropy_with_label_smoothing_and_ignore_index():
    torch.manual_seed(4)
    logits = torch.randn(4, 10)
    targets = torch.tensor([1, 2, -100, 3])
    plain = torch.nn.functional.cross_entropy(logits[[0, 1, 3]], targets[[0, 1, 3]])
    assert torch.isclose(ar_loss(logits, targets, 0.0), plain)
    assert not torch.isclose(ar_loss(logits, targets, 0.1), plain)
    assert ar_loss(logits, torch.full((4,), -100), 0.1).item() == 0.0


def test_total_loss_weights_ar():
    assert total_loss(torch.tensor(1.0), torch.tensor(2.0), 10.0).item() == 21.0

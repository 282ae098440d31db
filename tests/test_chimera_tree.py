"""The static tree: construction, its mask and positions, and longest-path acceptance on hand-made logits."""

from __future__ import annotations

import pytest
import torch

from fastforward.chimera.tree import build_tree, chain_tree, default_tree, tree_tokens
from fastforward.core.acceptance import accept_tree as accept_greedy
from fastforward.core.acceptance import accept_tree_typical as accept_typical
from fastforward.core.acceptance import longest_path
from fastforward.core.masks import positions, tree_mask, tree_visibility

from .conftest import make_tiny

# root; a=(0) b=(1); a0=(0,0) a1=(0,1) b0=(1,0); a00=(0,0,0)
PATHS = [(1, 0), (0,), (0, 0, 0), (1,), (0, 1), (0, 0)]


def test_build_tree_orders_by_depth_and_links_parents():
    t = build_tree(PATHS)
    assert t.paths == ((0,), (1,), (0, 0), (0, 1), (1, 0), (0, 0, 0))
    assert t.parents == (-1, 0, 0, 1, 1, 2, 3)
    assert t.depths == (0, 1, 1, 2, 2, 2, 3)
    assert (t.size, t.max_depth, t.top_k) == (7, 3, 2)
    with pytest.raises(ValueError):
        build_tree([(0, 0)])  # parent (0,) missing


def test_default_tree_has_25_nodes_and_4_first_level_branches():
    t = default_tree(4)
    assert t.size == 25 and t.max_depth == 4
    assert sum(1 for d in t.depths if d == 1) == 4
    assert default_tree(2).max_depth == 2
    assert chain_tree(3).parents == (-1, 0, 1, 2)


def test_tree_mask_and_positions_on_hand_made_tree():
    t = build_tree(PATHS)
    vis = tree_visibility(t.parents)
    # node 5 = b0 = (1, 0): sees root, b and itself
    assert vis[5].nonzero().flatten().tolist() == [0, 2, 5]
    assert vis[6].nonzero().flatten().tolist() == [0, 1, 3, 6]  # a00 sees root, a, a0
    assert not vis[3, 4] and not vis[4, 3]  # siblings do not see each other
    mask = tree_mask(make_tiny().model, vis, t.depths, prefix_len=10, dtype=torch.float32)
    assert mask.shape == (1, 1, 7, 17)
    assert (mask[0, 0, :, :10] == 0).all()  # everyone sees the prefix
    assert mask[0, 0, 6, 10 + 2] < 0 and mask[0, 0, 6, 10 + 3] == 0
    assert positions(t.depths, 10).tolist() == [[10, 11, 11, 12, 12, 12, 13]]


def test_tree_tokens_follow_ranks():
    t = build_tree(PATHS)
    top = torch.tensor([[10, 11], [20, 21], [30, 31]])  # head k, rank r -> 10(k+1) + r
    assert tree_tokens(t, 99, top) == [99, 10, 11, 20, 21, 20, 30]


def test_longest_path_prefers_depth_then_first_listed():
    parents = [-1, 0, 0, 1, 2]
    assert longest_path(parents, [0, 1, 1, 0, 1]) == [0, 2, 4]
    assert longest_path(parents, [0, 1, 1, 1, 1]) == [0, 1, 3]
    assert longest_path(parents, [0, 0, 0, 1, 1]) == [0]  # children of rejected nodes do not count


def test_greedy_acceptance_on_hand_made_argmax():
    t = build_tree(PATHS)
    tokens = [99, 10, 11, 20, 21, 20, 30]
    # target argmax after each node: after root -> 11 (so b accepted, a rejected); after b -> 20 (b0 ok)
    target_next = [11, 21, 20, 30, 0, 7, 0]
    assert accept_greedy(tokens, t.parents, target_next) == [0, 2, 5]
    # a path all the way: root->a->a0->a00
    assert accept_greedy(tokens, t.parents, [10, 20, 0, 30, 0, 0, 5]) == [0, 1, 3, 6]
    assert accept_greedy(tokens, t.parents, [1, 2, 3, 4, 5, 6, 7]) == [0]


def test_typical_acceptance_on_hand_made_distributions():
    parents = [-1, 0, 0, 1]
    tokens = [0, 1, 2, 3]
    v = 4
    probs = torch.full((4, v), 0.25)
    probs[0] = torch.tensor([0.05, 0.05, 0.85, 0.05])  # confident: low threshold min(0.09, 0.3*e^-H)
    probs[1] = torch.tensor([0.25, 0.25, 0.25, 0.25])
    probs[2] = torch.tensor([0.7, 0.1, 0.1, 0.1])
    # node 1 (token 1) has p=0.05 under a low-entropy root -> threshold = min(0.09, 0.3*exp(-H)) ~ 0.16 -> reject
    # node 2 (token 2) p=0.85 -> accept; node 3 is a child of the rejected node 1
    assert accept_typical(tokens, parents, probs, eps=0.09, alpha=0.3) == [0, 2]
    # a flat parent: threshold = min(eps, alpha * exp(-log 4)) = min(0.09, 0.075) = 0.075 < 0.25 -> accept
    probs[0] = torch.tensor([0.25, 0.25, 0.25, 0.25])
    assert accept_typical(tokens, parents, probs, eps=0.09, alpha=0.3) == [0, 1, 3]
    # eps caps the threshold: with alpha huge, threshold = eps = 0.3 > 0.25 -> nothing accepted
    assert accept_typical(tokens, parents, probs, eps=0.3, alpha=100.0) == [0]

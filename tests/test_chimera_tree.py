"""Trees: construction, mask and positions, longest-path acceptance on hand-made logits, and the cost-sized
tree of ``tree=auto`` (which tree the measured acceptance and costs call for, and how acceptance is counted)."""

from __future__ import annotations

import pytest
import torch

from fastforward.chimera.tree import (
    AcceptanceStats,
    TreeSizer,
    best_tree,
    build_tree,
    chain_tree,
    default_tree,
    graft_chain,
    likeliest_paths,
    path_probability,
    tree_tokens,
)
from fastforward.core.acceptance import accept_tree as accept_greedy
from fastforward.core.acceptance import accept_tree_typical as accept_typical
from fastforward.core.acceptance import longest_path
from fastforward.core.masks import positions, tree_mask, tree_visibility
from fastforward.core.pacing import StepCost

from .conftest import make_tiny


def candidate_paths(depth: int, ranks: int) -> list[tuple[int, ...]]:
    """Every path of at most ``depth`` nodes whose ranks are below ``ranks`` (the nodes a tree may hold)."""
    level: list[tuple[int, ...]] = [()]
    out: list[tuple[int, ...]] = []
    for _ in range(depth):
        level = [p + (r,) for p in level for r in range(ranks)]
        out.extend(level)
    return out


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


def _rates(depth: int, top1: float, others: float, ranks: int = 4) -> list[list[float]]:
    return [[top1] + [others] * (ranks - 1) for _ in range(depth)]


def test_best_tree_is_the_exhaustive_optimum_and_a_valid_tree():
    q = [[0.7, 0.15, 0.05, 0.02], [0.6, 0.2, 0.05, 0.01], [0.5, 0.2, 0.1, 0.05]]
    verify = lambda k: 20.0 + 1.5 * k  # noqa: E731
    tree, rate = best_tree(q, verify, lambda depth: 3.0, 31)
    ranked = sorted((path_probability(p, q) for p in candidate_paths(3, 4)), reverse=True)
    exhaustive = max((1 + sum(ranked[:n])) / (3.0 + verify(n + 1)) for n in range(1, 32))
    assert rate == pytest.approx(exhaustive)
    assert build_tree(tree.paths) == tree  # every node's parent is in it
    assert (0,) in tree.paths and (0, 0) in tree.paths


def test_costlier_verify_widths_give_smaller_trees():
    q = _rates(4, 0.6, 0.1)
    draft = lambda depth: 2.0  # noqa: E731
    flat = best_tree(q, lambda k: 30.0, draft, 31)[0]  # a wide forward costs what a narrow one does
    steep = best_tree(q, lambda k: 30.0 * k, draft, 31)[0]  # every token costs a full forward
    medium = best_tree(q, lambda k: 30.0 + 2.5 * k, draft, 31)[0]
    assert flat.size == 32  # every candidate is worth verifying for free
    assert steep.size == 2  # only the likeliest node: more would cost a forward each
    assert steep.size < medium.size < flat.size
    assert medium.paths[0] == (0,)


def test_costlier_heads_give_shallower_trees():
    q, verify = _rates(4, 0.7, 0.05), lambda k: 30.0 + 0.5 * k  # noqa: E731
    cheap = best_tree(q, verify, lambda depth: 1.0 + 0.1 * depth, 31)[0]
    costly = best_tree(q, verify, lambda depth: 1.0 + 8.0 * depth, 31)[0]
    assert cheap.max_depth == 4 and costly.max_depth < 4


def test_higher_acceptance_gives_deeper_trees():
    verify = lambda k: 30.0 + 2.0 * k  # noqa: E731
    draft = lambda depth: 2.0  # noqa: E731
    weak = best_tree(_rates(4, 0.2, 0.05), verify, draft, 31)[0]
    strong = best_tree(_rates(4, 0.9, 0.02), verify, draft, 31)[0]
    assert strong.max_depth == 4 and weak.max_depth < strong.max_depth
    with pytest.raises(ValueError):
        best_tree([], verify, draft, 4)


def test_acceptance_stats_count_every_rank_up_to_the_reached_depth():
    stats = AcceptanceStats(depth=3, ranks=3, prior=0.4, prior_n=4.0, decay=1.0)
    top_ids = [[10, 11, 12], [20, 21, 22], [30, 31, 32]]
    stats.observe([11, 99], top_ids)  # depth 0 took rank 1; depth 1 (the target's own token) matched none
    assert stats.trials == [1.0, 1.0, 0.0]
    stats.observe([10, 20, 30], top_ids[:1])  # only head 0 ran: deeper depths are not scored
    assert stats.trials == [2.0, 1.0, 0.0]
    stats.hits[0][0] = 0.0
    assert stats.hits[0] == [0.0, 1.0, 0.0] and stats.hits[1] == [0.0, 0.0, 0.0]
    q = stats.rates()
    assert q[0][1] == pytest.approx((1 + 4 * 0.4 / 2) / (2 + 4))
    assert q[2][0] == pytest.approx(0.4)  # unseen depth: the prior
    for _ in range(200):
        stats.observe([10, 20, 30], top_ids)
    assert stats.rates()[0][0] == pytest.approx((200 + 1.6) / (202 + 4))
    always = AcceptanceStats(depth=1, ranks=2, prior=1.0, decay=0.9)
    always.observe([5], [[5, 6]])
    assert always.rates()[0] == [0.999, pytest.approx(2.0 / 5.0)]  # clipped: a child stays below its parent


def test_tree_sizer_follows_measured_costs_and_acceptance():
    sizer = TreeSizer(lambda k: 10.0 + k, depth=4, ranks=4, max_nodes=31)
    top_ids = [[1, 2, 3, 4]] * 4
    first = sizer.tree()
    for _ in range(40):  # the top-1 chain is always right; verify runs at 4x the curve
        sizer.observe(StepCost(4, 4, 2.0, 4 * (10.0 + 5), 0.5, tokens=[1, 1, 1, 1, 1], candidates=top_ids))
    assert sizer.scale == pytest.approx(4.0, rel=1e-3)
    assert sizer.draft_ms(4) == pytest.approx(0.5 + 4 * 0.5, rel=1e-3)  # 2 ms over 4 heads
    chain = sizer.tree()
    assert chain.paths[:4] == ((0,), (0, 0), (0, 0, 0), (0, 0, 0, 0))
    assert chain.size < first.size or chain.max_depth == 4
    for _ in range(60):  # the first head stops being right: the tree shrinks to a node or two
        sizer.observe(StepCost(1, 0, 0.5, 4 * 12.0, 0.5, tokens=[7], candidates=top_ids[:1]))
    assert sizer.stats.rates()[0][0] < 0.3
    assert sizer.tree().size <= 3 < chain.size


def test_graft_chain_follows_shared_nodes_and_appends_the_rest():
    tree = build_tree(PATHS)  # root, a, b, a0, a1, b0, a00
    tokens = [9, 10, 11, 20, 21, 22, 30]  # a=10 b=11 a0=20 a1=21 b0=22 a00=30
    # the chain agrees with a -> a1, then leaves the tree: 2 new nodes under a1
    toks, parents, depths = graft_chain(tokens, tree.parents, tree.depths, [10, 21, 40, 41])
    assert toks == tokens + [40, 41]
    assert parents == list(tree.parents) + [4, 7]
    assert depths == list(tree.depths) + [3, 4]
    vis = tree_visibility(parents)  # still a valid tree: parents before children
    assert vis[8].nonzero().flatten().tolist() == [0, 1, 4, 7, 8]
    # a chain the tree already holds adds nothing; one that leaves at the root hangs from the root
    assert graft_chain(tokens, tree.parents, tree.depths, [10, 20, 30])[0] == tokens
    toks, parents, depths = graft_chain(tokens, tree.parents, tree.depths, [50, 20])
    assert (toks[7:], parents[7:], depths[7:]) == ([50, 20], [0, 7], [1, 2])
    assert graft_chain(tokens, tree.parents, tree.depths, [])[0] == tokens


def test_nodes_beside_the_tree_cost_their_width_and_add_their_yield():
    q, draft = _rates(4, 0.6, 0.1), lambda depth: 2.0  # noqa: E731
    verify = lambda k: 30.0 + 3.0 * k  # noqa: E731
    alone, rate = best_tree(q, verify, draft, 31)
    _, rate_beside = best_tree(q, verify, draft, 31, extra_width=6, extra_tokens=0.0)
    assert rate_beside < rate  # 6 more nodes that add nothing only cost
    paid, rate_paid = best_tree(q, verify, draft, 31, extra_width=6, extra_tokens=2.0)
    assert rate_paid > rate  # a branch that adds 2 tokens per step pays for its 6 nodes here
    n = paid.size - 1
    expected = 1 + 2.0 + sum(path_probability(p, q) for p in paid.paths)
    assert rate_paid == pytest.approx(expected / (2.0 + verify(n + 1 + 6)))


def test_an_untimed_sizer_ignores_measured_times():
    timed, untimed = (TreeSizer(lambda k: 10.0 + k, depth=4, timed=t) for t in (True, False))
    for sizer in (timed, untimed):
        for _ in range(20):
            sizer.observe(StepCost(4, 1, 9.0, 60.0, 3.0, tokens=[1, 1], candidates=[[1, 2, 3, 4]] * 2))
    assert timed.scale > 3.0 and untimed.scale == 1.0
    assert untimed.stats.trials == timed.stats.trials  # acceptance is still counted
    assert untimed.head_ms == pytest.approx(0.02 * 11.0) and timed.head_ms > 4.0  # first guess vs measured


@pytest.mark.parametrize("seed", range(4))
def test_likeliest_paths_are_the_head_of_the_exhaustive_sort(seed):
    """The best-first search returns exactly the first n paths of scoring and sorting every candidate path of
    at most D nodes (likeliest first; ties shorter, then by ranks), ties included."""
    import random

    rng = random.Random(seed)
    q = [sorted((round(rng.random(), 1) * 0.99 for _ in range(4)), reverse=True) for _ in range(4)]
    for depth in range(1, 5):
        exhaustive = sorted(
            ((path_probability(p, q), p) for p in candidate_paths(depth, 4)),
            key=lambda sp: (-sp[0], len(sp[1]), sp[1]),
        )
        for n in (1, 7, 31, 400):
            assert likeliest_paths(q, depth, n) == exhaustive[:n]

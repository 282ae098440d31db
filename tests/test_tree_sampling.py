"""The tree verifiers of :mod:`fastforward.core.acceptance`, tested directly as pure functions.

:func:`accept_tree_sampled` (recursive rejection sampling over a tree of candidates) must leave the target's
distribution unchanged whatever the tree holds. On a hand-made tree with hand-made target distributions at
every node, the law of the output is known exactly: the first committed token follows the root's
distribution p_0, and given that the first token is the one held by child c, the second follows p_c. The
tests draw the verifier many times with seeded generators and compare with chi-square goodness of fit
(:func:`chi_square_pvalue`, cells with expected count < 5 pooled); a deliberately wrong verifier (a rejected
candidate is not removed from the residual) is rejected by the same statistic, so the check has power.
"""

from __future__ import annotations

import pytest
import torch

from fastforward.core import acceptance
from fastforward.core.acceptance import (
    ConsultantRule,
    accept_tree,
    accept_tree_consultant,
    accept_tree_sampled,
    consultant_ema,
    fan_parents,
    merged_nodes,
)
from fastforward.core.decoder import SamplingConfig
from fastforward.core.sampling import processed_probs, sample_from

from .test_sd_sampling_distribution import chi_square_pvalue

V = 6
ALPHA = 1e-3
N_DRAWS = 6000

# root -> children 1 (token 2), 2 (token 4), 3 (token 2: a duplicate of node 1), 4 (token 0);
# node 1 -> 5 (token 3); node 3 -> 6 (token 1), merged under node 1; node 2 -> 7 (token 5)
TOKENS = [9, 2, 4, 2, 0, 3, 1, 5]
PARENTS = [-1, 0, 0, 0, 0, 1, 3, 2]


def _logits(seed: int, n: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, V, generator=g) * 1.5


def _first_two(path: list[int], extra: int, tokens: list[int]) -> tuple[int, int | None, int]:
    """(first committed token, second committed token or None, node whose distribution the second follows)."""
    committed = [tokens[i] for i in path[1:]] + [extra]
    return committed[0], (committed[1] if len(committed) > 1 else None), (path[1] if len(path) > 1 else -1)


def _draw(verifier, logits: torch.Tensor, cfg: SamplingConfig, n: int = N_DRAWS):
    gen = torch.Generator().manual_seed(123)
    return [verifier(TOKENS, PARENTS, logits, cfg, gen) for _ in range(n)]


CONFIGS = [
    SamplingConfig(temperature=1.0),
    SamplingConfig(temperature=0.7),
    SamplingConfig(temperature=1.0, top_k=3),
    SamplingConfig(temperature=0.7, top_p=0.8),
]


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: f"T{c.temperature}-k{c.top_k}-p{c.top_p}")
def test_tree_rejection_sampling_keeps_the_target_distribution(cfg: SamplingConfig) -> None:
    logits = _logits(0, len(TOKENS))
    probs = processed_probs(logits, cfg).double()
    draws = _draw(accept_tree_sampled, logits, cfg)
    first = torch.zeros(V, dtype=torch.float64)
    for path, extra in draws:
        first[_first_two(path, extra, TOKENS)[0]] += 1
    _, df, pvalue = chi_square_pvalue(first, probs[0])
    assert pvalue > ALPHA, f"first token: p={pvalue:.2e} (df {df})"
    # the second token, given the first came from node 1 (token 2, holding node 3's child too) or node 2
    for node, token in [(1, 2), (2, 4)]:
        second = torch.zeros(V, dtype=torch.float64)
        for path, extra in draws:
            a, b, via = _first_two(path, extra, TOKENS)
            if a == token:
                assert via == node, "an accepted duplicate must resolve to its merged node"
                second[b] += 1
        if second.sum() >= 200:
            _, df, pvalue = chi_square_pvalue(second, probs[node])
            assert pvalue > ALPHA, f"second token after node {node}: p={pvalue:.2e} (df {df})"
    # the verifier accepted candidates and rejected some (depth 2 too when no filter removes node 5's token)
    depths = [len(path) - 1 for path, _ in draws]
    assert 0 < depths.count(0) < len(draws)
    assert depths.count(2) > 0 or cfg.top_k or cfg.top_p < 1


def _wrong_verifier(tokens, parents, logits, cfg, gen, draft_probs=None):
    """Buggy on purpose: a rejected candidate stays in the distribution the extra token is drawn from."""
    children: dict[int, list[int]] = {}
    canon = merged_nodes(tokens, parents)
    for i in range(1, len(tokens)):
        if canon[i] == i:
            children.setdefault(canon[parents[i]], []).append(i)
    node, path = 0, [0]
    while True:
        p = processed_probs(logits[node], cfg)
        for child in children.get(node, []):
            if float(torch.rand((), generator=gen)) < float(p[tokens[child]]):
                node = child
                path.append(child)
                break
        else:
            return path, int(sample_from(p, gen))


def break_tree_rule(monkeypatch) -> None:
    """The control of the end-to-end sampling checks: every step of every method goes through the tree
    rule (chains too, instead of their fast path), and the tree rule is :func:`_wrong_verifier`."""
    monkeypatch.setattr(acceptance, "accept_tree_sampled", _wrong_verifier)
    monkeypatch.setattr(acceptance, "is_chain", lambda parents: False)


def test_the_check_rejects_a_verifier_that_forgets_the_residual() -> None:
    cfg = SamplingConfig(temperature=1.0)
    logits = _logits(0, len(TOKENS))
    probs = processed_probs(logits, cfg).double()
    first = torch.zeros(V, dtype=torch.float64)
    for path, extra in _draw(_wrong_verifier, logits, cfg):
        first[_first_two(path, extra, TOKENS)[0]] += 1
    _, _, pvalue = chi_square_pvalue(first, probs[0])
    assert pvalue < ALPHA, f"a wrong verifier passed (p={pvalue:.2e}): the check has no power"


def test_a_sampled_draft_chain_keeps_the_target_distribution() -> None:
    """With draft distributions q (not point masses) the rule is speculative sampling along a chain."""
    cfg = SamplingConfig(temperature=1.0)
    tokens, parents = [9, 1, 3], fan_parents([2])
    logits = _logits(1, 3)
    q = torch.softmax(_logits(2, 3), -1)
    p = processed_probs(logits, cfg).double()
    gen = torch.Generator().manual_seed(5)
    first = torch.zeros(V, dtype=torch.float64)
    for _ in range(N_DRAWS):
        # a fresh draft drawn from q at every trial, as a draft model would
        x1 = int(torch.multinomial(q[1], 1, generator=gen))
        tokens = [9, x1, int(torch.multinomial(q[2], 1, generator=gen))]
        path, extra = accept_tree_sampled(tokens, parents, logits, cfg, gen, draft_probs=q)
        first[([tokens[i] for i in path[1:]] + [extra])[0]] += 1
    _, _, pvalue = chi_square_pvalue(first, p[0])
    assert pvalue > ALPHA


def test_greedy_config_reduces_to_greedy_tree_acceptance() -> None:
    logits = _logits(3, len(TOKENS))
    tokens = list(TOKENS)
    best = logits.argmax(-1).tolist()
    tokens[2] = best[0]  # make node 2 right, and its child right too
    tokens[7] = best[2]
    path, extra = accept_tree_sampled(tokens, PARENTS, logits, SamplingConfig(), None)
    greedy = accept_tree(tokens, PARENTS, best)
    assert path == greedy and extra == best[path[-1]]


def test_merged_nodes_collapse_equal_siblings_and_their_subtrees() -> None:
    assert merged_nodes(TOKENS, PARENTS) == [0, 1, 2, 1, 4, 5, 6, 7]
    # two chains a b c / a b d: the second a and b merge, d stays a child of the merged b
    tokens, parents = [0, 5, 6, 7, 5, 6, 8], fan_parents([3, 3])
    assert merged_nodes(tokens, parents) == [0, 1, 2, 3, 1, 2, 6]


def test_consultant_on_a_chain_matches_the_chain_rule() -> None:
    """On a chain, the tree rule accepts the prefix the sequential definition accepts (the EMA of the
    target's NLL stays <= eps at every accepted token), and the EMA it carries adds the committed tokens."""
    logits = _logits(4, 4)
    logp = torch.log_softmax(logits, -1)
    draft = logits.argmax(-1).tolist()[:3]
    draft[2] = int(logits[2].argmin())  # an unlikely third token
    for eps, r_prev in [(2.0, 0.0), (0.5, 0.0), (2.0, 3.0), (100.0, 0.0)]:
        r, n = r_prev, 0
        while n < 3 and 0.2 * r + 0.8 * float(-logp[n, draft[n]]) <= eps:
            r, n = 0.2 * r + 0.8 * float(-logp[n, draft[n]]), n + 1
        rule = ConsultantRule(eps, 0.2).start()
        rule.ema = r_prev
        v = rule.verify([9, *draft], fan_parents([3]), logits, SamplingConfig(), None)
        assert v.accepted == n, (eps, r_prev)
        assert v.token == int(logits[n].argmax())
        assert rule.ema == pytest.approx(0.2 * r + 0.8 * float(-logp[n, v.token]))
        assert consultant_ema(r_prev, logits[v.path], v.tokens([9, *draft]), 0.2) == pytest.approx(rule.ema)


def test_consultant_on_a_tree_takes_the_longest_path_under_the_bound() -> None:
    # root's distribution: token 1 likely, token 2 unlikely; node 1 (token 1) -> node 3 (token 0, likely)
    probs = torch.tensor(
        [[0.05, 0.9, 0.01, 0.04], [0.9, 0.05, 0.03, 0.02], [0.25, 0.25, 0.25, 0.25], [0.25] * 4, [0.25] * 4]
    )
    tokens, parents = [3, 1, 2, 0, 3], [-1, 0, 0, 1, 2]
    path = accept_tree_consultant(tokens, parents, probs.log(), 0.0, 1.0, 0.2)
    assert path == [0, 1, 3]
    # a strict bound accepts nothing; a loose one the deepest path listed first
    assert accept_tree_consultant(tokens, parents, probs.log(), 0.0, 0.01, 0.2) == [0]
    assert accept_tree_consultant(tokens, parents, probs.log(), 0.0, 100.0, 0.2) == [0, 1, 3]

"""Which guessed tokens a target forward accepts: one module for every method.

A step verifies guesses arranged as a *tree* rooted at the last committed token (node 0): a chain of draft
tokens (speculative decoding, prompt lookup) is a tree with one branch, lookahead's pooled n-grams are
several chains from the root, Chimera's candidates a static tree. Node i's guess is judged against the
target's output at its parent; the accepted tokens are the longest root-to-node path of accepted nodes, and
the target's output after the path's last node is the one token the target always adds (bonus or
correction).

- Greedy (lossless): node i is accepted when its token is the target's argmax after its parent.
- Typical acceptance (Medusa, LOSSY): node i is accepted when the target gives its token probability above
  ``min(eps, alpha * exp(-H))`` after its parent.

Rejection sampling for sampled chains (lossless in distribution) and Consultant Decoding's rule live with
the speculative verifiers, which need draft probabilities or state; they reuse :func:`typical_threshold`
and :func:`accept_chain` from here.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Number of leading positions where ``a`` and ``b`` agree."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def accept_chain(draft: Sequence[int], target_next: Sequence[int]) -> int:
    """Greedy chain acceptance: how many leading draft tokens equal the target's argmax before them.

    ``target_next[i]`` is the target's argmax given the committed tokens and ``draft[:i]``; the target's own
    token after the accepted ones is ``target_next[accepted]``. Lossless."""
    return common_prefix(draft, target_next)


def chain_parents(lengths: Sequence[int]) -> list[int]:
    """Parents of a root followed by chains of the given lengths, each hanging from the root (node 0)."""
    parents = [-1]
    for n in lengths:
        for k in range(n):
            parents.append(0 if k == 0 else len(parents) - 1)
    return parents


def longest_path(parents: Sequence[int], ok: Sequence[bool]) -> list[int]:
    """Node indices from the root to the deepest node whose whole path is ok (ok[0], the root, is ignored).

    Parents must come before children. Ties between equally deep nodes go to the one listed first."""
    valid = [True] + [False] * (len(parents) - 1)
    depth = [0] * len(parents)
    best = 0
    for i in range(1, len(parents)):
        p = parents[i]
        valid[i] = valid[p] and bool(ok[i])
        depth[i] = depth[p] + 1
        if valid[i] and depth[i] > depth[best]:
            best = i
    path = []
    while best >= 0:
        path.append(best)
        best = parents[best]
    return path[::-1]


def accept_tree(tokens: Sequence[int], parents: Sequence[int], target_next: Sequence[int]) -> list[int]:
    """Exact greedy over a tree: node i is ok when its token equals the target's argmax after its parent.

    tokens: [N + 1] (root first); target_next: [N + 1] the target's argmax at every node. Lossless."""
    ok = [False] + [tokens[i] == target_next[parents[i]] for i in range(1, len(tokens))]
    return longest_path(parents, ok)


def typical_threshold(probs: torch.Tensor, eps: float, alpha: float) -> torch.Tensor:
    """Medusa's typical-acceptance threshold min(eps, alpha * exp(-H(p))). probs: [..., V] -> [...]."""
    entropy = -(probs * probs.clamp_min(1e-30).log()).sum(-1)
    return torch.minimum(torch.full_like(entropy, eps), alpha * torch.exp(-entropy))


def accept_tree_typical(
    tokens: Sequence[int], parents: Sequence[int], probs: torch.Tensor, eps: float = 0.09, alpha: float = 0.3
) -> list[int]:
    """Typical acceptance over a tree (LOSSY): node i is ok when p_parent(token_i) > the typical threshold of
    p_parent. probs: [N + 1, V] the target's distribution at every node (temperature applied by the caller)."""
    if len(tokens) < 2:
        return [0]
    thr = typical_threshold(probs, eps, alpha)  # [N + 1]
    par = torch.tensor(list(parents[1:]), dtype=torch.long, device=probs.device)
    tok = torch.tensor(list(tokens[1:]), dtype=torch.long, device=probs.device)
    ok = [False] + (probs[par, tok] > thr[par]).tolist()
    return longest_path(parents, ok)

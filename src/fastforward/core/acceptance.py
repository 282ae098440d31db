"""Which guessed tokens a target forward accepts: one module for every method.

A step verifies guesses arranged as a *tree* rooted at the last committed token (node 0): a chain of draft
tokens (speculative decoding, prompt lookup) is a tree with one branch, lookahead's pooled n-grams are
several chains from the root, Chimera's candidates a static tree. Node i's guess is judged against the
target's output at its parent; the accepted tokens are the longest root-to-node path of accepted nodes, and
the target's output after the path's last node is the one token the target always adds (bonus or
correction).

- Greedy (lossless): node i is accepted when its token is the target's argmax after its parent.
- Sampled (lossless in distribution): recursive rejection sampling over the tree (SpecInfer's multi-step
  speculative sampling, EAGLE's tree verification), :func:`accept_tree_sampled`. Deterministic drafts (top-k
  head candidates, pooled n-grams, Jacobi iterates, prompt lookup) are point masses, which the same rule
  covers: a candidate x is accepted with probability p(x), and a rejection removes x from the residual.
- Typical acceptance (Medusa, LOSSY): node i is accepted when the target gives its token probability above
  ``min(eps, alpha * exp(-H))`` after its parent.
- Consultant Decoding over a tree (LOSSY): the longest root path whose EMA-smoothed target NLL stays <= eps,
  :func:`accept_tree_consultant`.

The vectorised chain case of rejection sampling with a draft distribution q (``sd-sample``) and the chain
Consultant rule live with the speculative verifiers; they reuse :func:`typical_threshold` and
:func:`accept_chain` from here.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from fastforward.core.decoder import SamplingConfig
from fastforward.core.sampling import processed_probs, sample_from

# The lossy rules' default thresholds, one place for every method that offers them (speculative typical and
# consultant, Chimera's accept=typical|consultant): Medusa's typical cap, and Consultant Decoding's EMA-NLL bound.
TYPICAL_EPS = 0.09
CONSULTANT_EPS = 2.0


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
    tokens: Sequence[int],
    parents: Sequence[int],
    probs: torch.Tensor,
    eps: float = TYPICAL_EPS,
    alpha: float = 0.3,
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


def merged_nodes(tokens: Sequence[int], parents: Sequence[int]) -> list[int]:
    """For every node, the first node with the same token under an equivalent parent (itself if none).

    Two chains that start with the same token (lookahead's pooled n-grams ``a b c`` and ``a d e``) are one
    prefix tree: the target saw the same context at both copies of ``a``, so their outputs (and KV) are
    interchangeable. Sampling must merge them: after point-mass rejection of ``a`` the residual gives ``a``
    probability 0, so an unmerged second copy could never be accepted and its continuation never tried."""
    canon = list(range(len(tokens)))
    first: dict[tuple[int, int], int] = {}
    for i in range(1, len(tokens)):
        canon[i] = first.setdefault((canon[parents[i]], int(tokens[i])), i)
    return canon


def accept_tree_sampled(
    tokens: Sequence[int],
    parents: Sequence[int],
    logits: torch.Tensor,
    cfg: SamplingConfig,
    gen: torch.Generator | None,
    draft_probs: torch.Tensor | None = None,
) -> tuple[list[int], int]:
    """Recursive rejection sampling over a draft tree: lossless in distribution (SpecInfer, EAGLE).

    tokens: [N + 1] (root first), parents: [N + 1] (parents before children), logits: [N + 1, V] the target's
    logits at every node (what follows it), draft_probs: [N + 1, V] the distribution each node's token was
    drawn from, or None for point-mass (deterministic) drafts. From the root, the children of the current
    node are tried in order: child x is accepted with probability min(1, r(x) / q(x)), r starting as the
    target's processed distribution at the node; a rejection replaces r by normalise(max(0, r - q)) (for a
    point mass: r without x). An accepted child becomes the current node; when every child is rejected, or
    the node has none, the step's one extra token is drawn from r (the residual, or the full distribution
    at a leaf: the bonus token). Returns (accepted path of node indices from the root, extra token).

    With ``cfg.greedy`` the processed distribution is the argmax's point mass, so this reduces to greedy
    tree acceptance. Target distributions are processed lazily, only at the nodes the walk visits."""
    canon = merged_nodes(tokens, parents)
    children: dict[int, list[int]] = {}
    for i in range(1, len(tokens)):
        if canon[i] == i:
            children.setdefault(canon[parents[i]], []).append(i)
    node, path = 0, [0]
    while True:
        residual = processed_probs(logits[node], cfg)  # [V]
        chosen = None
        for child in children.get(node, []):
            x = int(tokens[child])
            q = None if draft_probs is None else draft_probs[child].float()
            qx = 1.0 if q is None else float(q[x])
            u = float(torch.rand((), generator=gen, device=residual.device))
            if u * qx < float(residual[x]):  # u < r(x) / q(x); a zero r(x) is never accepted
                chosen = child
                break
            if q is None:
                residual = residual.clone()
                residual[x] = 0.0
            else:
                residual = (residual - q).clamp_min(0.0)
            total = residual.sum()
            # r <= q everywhere is reachable only through rounding: fall back to the target
            residual = residual / total if total > 0 else processed_probs(logits[node], cfg)
        if chosen is None:
            return path, int(sample_from(residual, gen))
        node = chosen
        path.append(node)


def accept_tree_consultant(
    tokens: Sequence[int],
    parents: Sequence[int],
    logits: torch.Tensor,
    ema: float,
    eps: float,
    beta: float,
) -> list[int]:
    """Consultant Decoding's rule on a tree (LOSSY): the longest root path whose EMA of the target's NLL
    stays <= eps at every node.

    nll(i) = -log softmax(logits[parent(i)])[token_i] (raw target, temperature 1); the EMA along a path is
    r(i) = beta * r(parent) + (1 - beta) * nll(i), starting from ``ema`` (the value after the last committed
    token) at the root. Node i is ok when r(i) <= eps (a NaN rejects). The caller draws the step's extra
    token and carries the EMA on with :func:`consultant_ema`."""
    if len(tokens) < 2:
        return [0]
    logp = torch.log_softmax(logits.float(), -1)
    par = torch.tensor(list(parents[1:]), dtype=torch.long, device=logits.device)
    tok = torch.tensor(list(tokens[1:]), dtype=torch.long, device=logits.device)
    nll = [0.0] + (-logp[par, tok]).tolist()
    r = [ema] + [0.0] * (len(tokens) - 1)
    ok = [False] * len(tokens)
    for i in range(1, len(tokens)):
        r[i] = beta * r[parents[i]] + (1 - beta) * nll[i]
        ok[i] = r[i] <= eps
    return longest_path(parents, ok)


def consultant_ema(ema: float, logits: torch.Tensor, tokens: Sequence[int], beta: float) -> float:
    """Carry the Consultant EMA over committed tokens: ``logits[j]`` is the target's output before
    ``tokens[j]``. logits: [n, V]."""
    logp = torch.log_softmax(logits.float(), -1)
    for j, t in enumerate(tokens):
        ema = beta * ema + (1 - beta) * float(-logp[j, int(t)])
    return ema

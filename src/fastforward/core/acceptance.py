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

Every method judges its guesses through one object, a :class:`Rule` (:class:`ExactRule`, :class:`TypicalRule`,
:class:`ConsultantRule`; :func:`rule_for` builds one from a method's ``accept`` option): ``rule.verify(tokens,
parents, logits, ...)`` returns a :class:`Verdict`, the accepted path and the target's one extra token. A chain
takes a vectorised fast path behind the same call (greedy: one comparison of the draft with the target's argmax;
sampling: Leviathan et al.'s chain rejection sampling with one uniform per draft token). A rule with state across
the steps of one generation (Consultant's EMA) is copied per generation by :meth:`Rule.start`, so the rows of a
batch and the concurrent requests of a server never share it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from fastforward.core.decoder import SamplingConfig
from fastforward.core.sampling import processed_probs, sample_from, select_token

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


def fan_parents(lengths: Sequence[int]) -> list[int]:
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


# --------------------------------------------------------------------------- the one verification layer


@dataclass(frozen=True)
class Verdict:
    """One row's judged step: the accepted nodes from the root, and the target's token after the last one
    (the correction of the first rejected guess, or the bonus token when every guess on the path held)."""

    path: list[int]
    token: int

    @property
    def accepted(self) -> int:
        """Guessed tokens kept (the root is the anchor, already committed)."""
        return len(self.path) - 1

    def tokens(self, nodes: Sequence[int]) -> list[int]:
        """What the step commits: the accepted guesses, then the target's token."""
        return [int(nodes[i]) for i in self.path[1:]] + [self.token]


def is_chain(parents: Sequence[int]) -> bool:
    return all(p == i - 1 for i, p in enumerate(parents))


def accept_chain_sampled(
    draft: Sequence[int],
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    gen: torch.Generator | None,
) -> tuple[int, int]:
    """Leviathan et al. / Chen et al. speculative sampling on a chain: lossless in distribution.

    draft_probs: [g, V] the distribution each draft token was drawn from (None = point masses: prompt lookup,
    Jacobi iterates); target_probs: [g + 1, V], both processed with the same SamplingConfig. Draft token i is
    accepted with probability min(1, p_i(x) / q_i(x)); the first rejection is replaced by a draw from
    normalise(max(0, p_i - q_i)); after full acceptance the bonus token is drawn from p_g. One uniform per
    draft token, drawn at once. Returns (accepted, the token the target adds)."""
    g = len(draft)
    if g:
        idx = torch.tensor(list(draft), dtype=torch.long, device=target_probs.device)
        p = target_probs[:g].gather(-1, idx[:, None]).squeeze(-1)  # [g]
        q = torch.ones_like(p) if draft_probs is None else draft_probs.gather(-1, idx[:, None]).squeeze(-1)
        u = torch.rand(g, generator=gen, device=p.device)
        ok = (u * q < p).tolist()  # u < p / q without dividing by a zero q; p = 0 never accepted
        for i in range(g):
            if ok[i]:
                continue
            if draft_probs is None:
                residual = target_probs[i].clone()
                residual[int(draft[i])] = 0.0
            else:
                residual = (target_probs[i] - draft_probs[i]).clamp_min(0)
            total = residual.sum()
            residual = residual / total if total > 0 else target_probs[i]
            return i, int(sample_from(residual, gen))
    return g, int(sample_from(target_probs[g], gen))


def match_vocab(q: torch.Tensor, size: int) -> torch.Tensor:
    """Draft and target of one family may pad their LM heads differently; extra rows carry no mass."""
    if q.shape[-1] > size:
        return q[..., :size]
    return torch.nn.functional.pad(q, (0, size - q.shape[-1]))


class Rule:
    """How one row's guesses are judged after the target's forward; every method verifies through one.

    ``verify`` takes the row's block (``tokens`` [N + 1] with the anchor first, ``parents`` [N + 1], a chain
    being ``[-1, 0, 1, ...]``), the target's logits at every node [N + 1, V], the sampling config and its
    generator, and optionally the draft's distributions for the guesses (``draft_probs`` [N, V]; None for
    deterministic guesses, point masses) and the target's argmax at every node when the caller already has
    it (a batched forward computes it for all rows at once)."""

    name = "exact"
    lossless = True

    def start(self) -> Rule:
        """The rule for one generation: itself when it carries nothing across steps."""
        return self

    def verify(
        self,
        tokens: Sequence[int],
        parents: Sequence[int],
        logits: torch.Tensor | None,
        cfg: SamplingConfig,
        gen: torch.Generator | None,
        draft_probs: torch.Tensor | None = None,
        argmax: Sequence[int] | None = None,
    ) -> Verdict:
        raise NotImplementedError


class ExactRule(Rule):
    """Lossless: greedy acceptance when greedy (tokens identical to AR), rejection sampling when sampling
    (the target's distribution), over a chain or a tree."""

    def verify(self, tokens, parents, logits, cfg, gen, draft_probs=None, argmax=None) -> Verdict:
        chain = is_chain(parents)
        if cfg.greedy:
            best = list(argmax) if argmax is not None else logits.argmax(-1).tolist()
            if chain:
                path = list(range(accept_chain(tokens[1:], best) + 1))
            else:
                path = accept_tree(tokens, parents, best)
            return Verdict(path, int(best[path[-1]]))
        if draft_probs is not None:
            draft_probs = match_vocab(draft_probs.float(), logits.shape[-1])
        if chain:
            n, token = accept_chain_sampled(tokens[1:], draft_probs, processed_probs(logits, cfg), gen)
            return Verdict(list(range(n + 1)), token)
        if draft_probs is not None:  # the root row: the anchor was not drawn from the draft
            draft_probs = torch.cat([torch.zeros_like(draft_probs[:1]), draft_probs], dim=0)
        path, token = accept_tree_sampled(tokens, parents, logits, cfg, gen, draft_probs)
        return Verdict(path, token)


class TypicalRule(Rule):
    """Typical acceptance (Medusa; LOSSY): a guess is kept when the target's probability of it, at the
    sampling temperature (1 when greedy), exceeds min(eps, alpha * exp(-H)); the target's own choice follows."""

    name = "typical"
    lossless = False

    def __init__(self, eps: float = TYPICAL_EPS, alpha: float = 0.3) -> None:
        self.eps, self.alpha = eps, alpha

    def verify(self, tokens, parents, logits, cfg, gen, draft_probs=None, argmax=None) -> Verdict:
        temp = cfg.temperature if cfg.temperature > 0 else 1.0
        probs = torch.softmax(logits.float() / temp, -1)
        path = accept_tree_typical(tokens, parents, probs, self.eps, self.alpha)
        return Verdict(path, int(select_token(logits[path[-1]], cfg, gen)))


class ConsultantRule(Rule):
    """Consultant Decoding (Lin et al., ACL 2025, arXiv 2506.02391; LOSSY): the longest path whose EMA of the
    target's NLL stays <= eps. The EMA carries across the steps of one generation, through the committed
    tokens only (a rejected guess does not enter it), and starts at 0 after the prefill's token."""

    name = "consultant"
    lossless = False

    def __init__(self, eps: float = CONSULTANT_EPS, beta: float = 0.2) -> None:
        self.eps, self.beta, self.ema = eps, beta, 0.0

    def start(self) -> ConsultantRule:
        return ConsultantRule(self.eps, self.beta)

    def verify(self, tokens, parents, logits, cfg, gen, draft_probs=None, argmax=None) -> Verdict:
        path = accept_tree_consultant(tokens, parents, logits, self.ema, self.eps, self.beta)
        verdict = Verdict(path, int(select_token(logits[path[-1]], cfg, gen)))
        self.ema = consultant_ema(self.ema, logits[path], verdict.tokens(tokens), self.beta)
        return verdict


EXACT = ExactRule()
ACCEPT_RULES = ("exact", "greedy", "typical", "consultant")  # "greedy": exact's old name


def rule_for(accept: str, eps: float | None = None, alpha: float = 0.3, beta: float = 0.2) -> Rule:
    """The rule a method's ``accept`` option names; ``eps`` None takes the rule's default threshold."""
    if accept in ("exact", "greedy"):
        return EXACT
    if accept == "typical":
        return TypicalRule(TYPICAL_EPS if eps is None else eps, alpha)
    if accept == "consultant":
        return ConsultantRule(CONSULTANT_EPS if eps is None else eps, beta)
    raise ValueError(f"unknown acceptance rule {accept!r} (choose from {', '.join(ACCEPT_RULES)})")

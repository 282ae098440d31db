"""Verifiers: pure functions that judge a chain of draft tokens against one target forward.

Each takes the draft tokens ``[g]``, the target's logits at the ``g + 1`` positions that predict them (plus
one more for the bonus token) and returns a :class:`Verdict`. Names follow vLLM's rejection sampler:

- **accepted**: how many leading draft tokens are kept;
- **recovered**: the target's token that replaces the first rejected draft token;
- **bonus**: the target's extra token when every draft token was accepted.

So every step commits ``accepted + 1`` tokens (before stop handling). ``greedy`` and ``rejection`` are
lossless; ``typical`` and ``consultant`` are lossy and opt-in. Greedy and typical acceptance are the chain
case of :mod:`fastforward.core.acceptance`, shared with lookahead and Chimera.

The engine calls a verifier object (:class:`Verifier`): it says whether it is lossless, and a verifier with
state across steps (Consultant's EMA) keeps it itself and clears it in ``reset()``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fastforward.core.acceptance import CONSULTANT_EPS, TYPICAL_EPS, accept_chain, typical_threshold
from fastforward.core.decoder import SamplingConfig
from fastforward.core.sampling import processed_probs, sample_from


@dataclass(frozen=True)
class Verdict:
    accepted: int  # leading draft tokens kept
    next_token: int  # recovered (after a rejection) or bonus (all accepted)
    bonus: bool  # True when next_token is the bonus token

    def tokens(self, draft: list[int]) -> list[int]:
        return list(draft[: self.accepted]) + [self.next_token]


@dataclass(frozen=True)
class ConsultantVerdict(Verdict):
    ema: float = 0.0  # EMA of the target's NLL after the tokens this step commits (carried to the next step)


def _target_token(logits: torch.Tensor, cfg: SamplingConfig, gen: torch.Generator | None) -> int:
    """The target's own choice at one position: argmax when greedy, else a draw from processed_probs."""
    if cfg.greedy:
        return int(logits.argmax(-1))
    return int(sample_from(processed_probs(logits, cfg), gen))


def verify_greedy(draft: list[int], target_logits: torch.Tensor) -> Verdict:
    """Exact greedy: accept while the draft token is the target's argmax. target_logits: [g + 1, V]."""
    best = target_logits.argmax(-1).tolist()  # [g + 1]
    n = accept_chain(draft, best)
    return Verdict(n, int(best[n]), n == len(draft))


def verify_rejection(
    draft: list[int],
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    gen: torch.Generator | None,
) -> Verdict:
    """Leviathan et al. / Chen et al. speculative sampling: lossless in distribution.

    draft_probs: [g, V] the distribution each draft token was drawn from (None = deterministic drafts, i.e.
    one-hot q, as for prompt lookup); target_probs: [g + 1, V]. Both must come from ``processed_probs`` with
    the same SamplingConfig. Draft token i is accepted with probability min(1, p_i(x) / q_i(x)); the first
    rejection is replaced by a draw from normalise(max(0, p_i - q_i)); after full acceptance a bonus token is
    drawn from p_g.
    """
    g = len(draft)
    if g:
        idx = torch.tensor(draft, dtype=torch.long, device=target_probs.device)
        p = target_probs[:g].gather(-1, idx[:, None]).squeeze(-1)  # [g]
        q = torch.ones_like(p) if draft_probs is None else draft_probs.gather(-1, idx[:, None]).squeeze(-1)
        u = torch.rand(g, generator=gen, device=p.device)
        ok = (u * q <= p).tolist()  # u < p / q without dividing by a zero q
    for i in range(g):
        if not ok[i]:
            if draft_probs is None:
                q_i = torch.zeros_like(target_probs[i])
                q_i[draft[i]] = 1.0
            else:
                q_i = draft_probs[i]
            residual = (target_probs[i] - q_i).clamp_min(0)
            total = residual.sum()
            residual = residual / total if total > 0 else target_probs[i]
            return Verdict(i, int(sample_from(residual, gen)), False)
    return Verdict(g, int(sample_from(target_probs[g], gen)), True)


def verify_typical(
    draft: list[int],
    target_logits: torch.Tensor,
    cfg: SamplingConfig,
    gen: torch.Generator | None,
    eps: float = TYPICAL_EPS,
    alpha: float = 0.3,
) -> Verdict:
    """Typical acceptance (Medusa, Cai et al. 2024): LOSSY.

    Draft token x at position i is accepted when p_i(x) > min(eps, alpha * exp(-H(p_i))), with p_i the
    target's softmax at temperature ``cfg.temperature`` (temperature 1 when greedy, i.e. the raw model
    distribution). The first rejected token is replaced by the target's own choice (argmax when greedy, a
    draw from processed_probs when sampling); full acceptance adds the target's bonus token the same way.
    """
    temp = cfg.temperature if cfg.temperature > 0 else 1.0
    probs = torch.softmax(target_logits.float() / temp, -1)  # [g + 1, V]
    g = len(draft)
    n = 0
    if g:
        idx = torch.tensor(draft, dtype=torch.long, device=probs.device)
        p = probs[:g].gather(-1, idx[:, None]).squeeze(-1)
        ok = (p > typical_threshold(probs[:g], eps, alpha)).tolist()
        while n < g and ok[n]:
            n += 1
    return Verdict(n, _target_token(target_logits[n], cfg, gen), n == g)


def verify_consultant(
    draft: list[int],
    target_logits: torch.Tensor,
    cfg: SamplingConfig,
    gen: torch.Generator | None,
    r_prev: float = 0.0,
    eps: float = CONSULTANT_EPS,
    beta: float = 0.2,
) -> ConsultantVerdict:
    """Consultant Decoding (Lin et al., ACL 2025, arXiv 2506.02391): LOSSY.

    With nll_i = -log softmax(target_logits_i)[x_i] (the target's raw NLL, temperature 1, like its training
    loss), the EMA is r_i = beta * r_{i-1} + (1 - beta) * nll_i and draft token x_i is accepted while
    r_i <= eps. The first rejected token is replaced by the target's own choice (argmax when greedy, a draw
    from processed_probs when sampling); full acceptance adds the target's bonus token the same way.

    State: ``r_prev`` is the EMA after the last committed token. It is 0.0 before the first verification
    step (the token the prefill produces does not enter it) and
    it CARRIES across steps: the returned ``ema`` is the one after every token this step commits,
    i.e. the accepted draft tokens and then the recovered/bonus token (updated with its own target NLL). A
    rejected draft token does not enter the carried EMA.
    """
    logp = torch.log_softmax(target_logits.float(), -1)  # [g + 1, V]
    g = len(draft)
    nll = (-logp[torch.arange(g), torch.tensor(draft, dtype=torch.long)]).tolist() if g else []
    r = r_prev
    n = 0
    while n < g:
        r_next = beta * r + (1 - beta) * nll[n]
        if not r_next <= eps:  # NaN-safe: a NaN NLL rejects
            break
        r, n = r_next, n + 1
    tok = _target_token(target_logits[n], cfg, gen)
    r = beta * r + (1 - beta) * float(-logp[n, tok])
    return ConsultantVerdict(n, tok, n == g, ema=r)


# --------------------------------------------------------------------------- verifier objects for the engine


class Verifier:
    """Judges one step: (draft tokens [g], draft probs [g, V] | None, target logits [g + 1, V]) -> Verdict."""

    lossless: bool = True

    def reset(self) -> None:
        """Forget state carried across steps; called before each generation."""

    def __call__(
        self,
        draft: list[int],
        draft_probs: torch.Tensor | None,
        logits: torch.Tensor,
        cfg: SamplingConfig,
        gen: torch.Generator | None,
    ) -> Verdict:
        raise NotImplementedError


class ExactVerifier(Verifier):
    """Lossless: greedy equality when greedy, rejection sampling on processed_probs when sampling."""

    def __call__(self, draft, draft_probs, logits, cfg, gen) -> Verdict:
        if cfg.greedy:
            return verify_greedy(draft, logits)
        p = processed_probs(logits, cfg)  # [g + 1, V]
        if draft_probs is not None and draft_probs.shape[-1] != p.shape[-1]:
            draft_probs = match_vocab(draft_probs, p.shape[-1])
        return verify_rejection(draft, draft_probs, p, gen)


class TypicalVerifier(Verifier):
    lossless = False

    def __init__(self, eps: float, alpha: float) -> None:
        self.eps, self.alpha = eps, alpha

    def __call__(self, draft, draft_probs, logits, cfg, gen) -> Verdict:
        return verify_typical(draft, logits, cfg, gen, self.eps, self.alpha)


class ConsultantVerifier(Verifier):
    """Consultant Decoding; keeps the EMA of the target's NLL across the steps of one generation."""

    lossless = False

    def __init__(self, eps: float, beta: float) -> None:
        self.eps, self.beta = eps, beta
        self.reset()

    def reset(self) -> None:
        self.ema = 0.0

    def __call__(self, draft, draft_probs, logits, cfg, gen) -> Verdict:
        verdict = verify_consultant(draft, logits, cfg, gen, self.ema, self.eps, self.beta)
        self.ema = verdict.ema
        return verdict


def match_vocab(q: torch.Tensor, size: int) -> torch.Tensor:
    """Draft and target of one family may pad their LM heads differently; extra rows carry no mass."""
    if q.shape[-1] > size:
        return q[..., :size]
    return torch.nn.functional.pad(q, (0, size - q.shape[-1]))

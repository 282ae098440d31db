"""The draft-then-verify loop: one target forward per step over [last committed token + draft tokens].

Invariant: the target's KV cache holds every committed token except the last one. A step feeds that last
token and the g draft tokens at explicit positions, the verifier returns how many drafts are accepted and
the target's recovered/bonus token, the loop commits them through ``apply_stops`` (so EOS and
max_new_tokens end exactly where AR would) and crops the cache back to committed length - 1 (no copies).

Counters (summed over samples by the bench; derive rates from them):
``spec_steps`` verification forwards; ``spec_proposed`` / ``spec_accepted`` draft tokens proposed /
accepted; ``spec_recovered`` / ``spec_bonus`` how each step's target token arose;
``spec_proposed_per_position`` / ``spec_accepted_per_position`` the same by draft position (lists);
``spec_gamma_sum`` the sum of per-step draft budgets (mean gamma = spec_gamma_sum / spec_steps).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from fastforward.core.cache import rollback
from fastforward.core.decoder import Decoder, Run, Timer
from fastforward.core.sampling import make_generator, select_token
from fastforward.decoders.speculative.drafters import DraftContext, Proposal
from fastforward.decoders.speculative.verifiers import Verdict, Verifier
from fastforward.errors import FastForwardError


def next_gamma(gamma: int, proposed: int, accepted: int, lo: int, hi: int) -> int:
    """Adaptive draft length: +1 after a full acceptance, -1 after a rejection, kept in [lo, hi]."""
    if proposed == 0:
        return gamma
    return min(hi, gamma + 1) if accepted == proposed else max(lo, gamma - 1)


def expected_tokens(alpha: float, gamma: int) -> float:
    """Tokens one step commits on average when each draft token is accepted with probability ``alpha``
    (independently, as in Leviathan et al.): the accepted prefix plus the target's own token."""
    if alpha >= 1.0:
        return gamma + 1.0
    return (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)


def best_gamma(
    alpha: float, draft_cost: float, verify_cost: Callable[[int], float], gamma_max: int, gamma_min: int = 1
) -> int:
    """The draft length with the most expected tokens per unit of time: a step costs ``gamma`` draft
    forwards (``draft_cost`` each) plus one verify forward over ``gamma + 1`` tokens (``verify_cost(k)``),
    all in the same unit. On a CPU where a wide verify costs ~1x a narrow one and the draft is cheap,
    this is long; with an expensive draft or a low acceptance rate it shrinks to 1, or with
    ``gamma_min=0`` to 0: a plain AR step, when no draft pays for itself at all."""
    return max(
        range(gamma_min, gamma_max + 1),
        key=lambda g: expected_tokens(alpha, g) / (g * draft_cost + verify_cost(g + 1)),
    )


class CostTracker:
    """Running estimates, within one request, of what :func:`best_gamma` needs: the acceptance rate (an
    exponential average of each step's accepted/proposed, starting from an even prior), the draft's cost
    per token and the verify forward's cost per width (ms, exponential averages; an unseen width takes
    the nearest measured one).

    When no draft length pays (a draft that is slow or rarely right on this text and machine) it returns
    0 and the step is plain AR, so speculation costs at most its probes; while it is off, each AR step
    moves the acceptance estimate a little back towards the prior, so the draft is tried again (text
    changes within a request) about every ``1 / relax`` steps."""

    PRIOR = 0.5

    def __init__(self, decay: float = 0.7, relax: float = 0.05) -> None:
        self.decay, self.relax = decay, relax
        self.alpha = self.PRIOR
        self.draft_ms: float | None = None
        self.verify_ms: dict[int, float] = {}

    def _avg(self, old: float | None, new: float) -> float:
        return new if old is None else self.decay * old + (1 - self.decay) * new

    def observe(self, proposed: int, accepted: int, draft_ms: float, verify_ms: float) -> None:
        if proposed:
            self.alpha = self._avg(self.alpha, accepted / proposed)
            self.draft_ms = self._avg(self.draft_ms, draft_ms / proposed)
        else:  # an AR step: nothing learned about the draft; drift back so that it is probed again
            self.alpha += self.relax * (self.PRIOR - self.alpha)
        k = proposed + 1
        self.verify_ms[k] = self._avg(self.verify_ms.get(k), verify_ms)

    def verify_cost(self, k: int) -> float:
        nearest = min(self.verify_ms, key=lambda w: (abs(w - k), w))
        return self.verify_ms[nearest]

    def gamma(self, current: int, gamma_max: int) -> int:
        if self.draft_ms is None or not self.verify_ms:
            return current
        return best_gamma(min(self.alpha, 0.99), self.draft_ms, self.verify_cost, gamma_max, gamma_min=0)


@dataclass(frozen=True)
class SpecConfig:
    gamma: int = 5
    adaptive: bool = False
    gamma_max: int = 12  # upper bound of the adaptive schedule
    gamma_auto: bool = False  # each step's gamma from measured draft/verify costs and acceptance
    require_sampling: bool = False  # sd-sample: refuse greedy configs

    def validate(self) -> None:
        if self.gamma < 1:
            raise FastForwardError(f"gamma (draft length) must be >= 1, got {self.gamma}")
        if (self.adaptive or self.gamma_auto) and self.gamma_max < self.gamma:
            raise FastForwardError(f"gamma_max ({self.gamma_max}) must be >= gamma ({self.gamma})")
        if self.adaptive and self.gamma_auto:
            raise FastForwardError("choose one draft-length schedule: adaptive or gamma_auto, not both")


class SpeculativeDecoder(Decoder):
    """One loop for every draft-then-verify method; what differs is the drafter and the verifier.

    ``lossless`` comes from the verifier, ``needs_draft`` from whether the drafter runs a separate model."""

    def __init__(
        self,
        model: torch.nn.Module,
        drafter,
        verifier: Verifier,
        spec: SpecConfig,
        name: str,
        needs_draft: bool = False,
    ) -> None:
        super().__init__(model)
        spec.validate()
        self.drafter, self.verifier, self.spec = drafter, verifier, spec
        self.name, self.lossless, self.needs_draft = name, verifier.lossless, needs_draft
        self.in_all = verifier.lossless and not spec.require_sampling
        # gamma_auto's estimates, kept across requests: the costs are this machine's, and the acceptance
        # rate of a workload moves less between its requests than relearning it each time would cost
        # (a draft that does not pay here is not even prefilled on the next request)
        self.costs = CostTracker()

    def _generate(self, prompt_ids: torch.Tensor, run: Run) -> None:
        config, cfg, stats = run.config, run.config.sampling, run.stats
        if self.spec.require_sampling and cfg.greedy:
            raise FastForwardError(
                f"method '{self.name}' samples: pass --temperature > 0 (use 'sd' for greedy)"
            )
        gen = make_generator(cfg, self.device)
        cache, out = self.prefill(prompt_ids, run)
        run.commit([int(select_token(out.logits[0, -1], cfg, gen))])
        tokens = run.tokens
        prompt = prompt_ids[0].tolist()
        self.drafter.reset()
        self.verifier.reset()
        ex = _Counters()
        gamma = self.spec.gamma
        # seeded sampling keeps the fixed gamma: a schedule from measured times would not reproduce the seed
        costs = self.costs if self.spec.gamma_auto and not cfg.seeded else None
        if costs is not None:
            gamma = costs.gamma(gamma, self.spec.gamma_max)
        while not run.done:
            seq = prompt + tokens
            g = min(gamma, config.max_new_tokens - len(tokens) - 1)
            proposal = Proposal([])
            t0 = time.perf_counter()
            if g > 0:
                with Timer(stats, "draft_time_s"):
                    ctx = DraftContext(seq, g, cfg, gen, config.eos_token_ids)
                    proposal = self.drafter.propose(ctx)
            t1 = time.perf_counter()
            draft = proposal.tokens
            n_seq = len(seq)
            logits = self.model(
                input_ids=torch.tensor([[seq[-1]] + draft], device=self.device),
                position_ids=torch.arange(n_seq - 1, n_seq + len(draft), device=self.device)[None],
                past_key_values=cache,
                use_cache=True,
            ).logits[0]  # [g + 1, V]
            verdict = self.verifier(draft, proposal.probs, logits, cfg, gen)
            run.commit(verdict.tokens(draft))
            rollback(cache, n_seq + verdict.accepted)
            self.drafter.observe(verdict.accepted)
            ex.add(g, len(draft), verdict)
            if self.spec.adaptive:
                gamma = next_gamma(gamma, len(draft), verdict.accepted, 1, self.spec.gamma_max)
            elif costs is not None:
                t2 = time.perf_counter()
                costs.observe(len(draft), verdict.accepted, (t1 - t0) * 1e3, (t2 - t1) * 1e3)
                gamma = costs.gamma(gamma, self.spec.gamma_max)
        stats.extras.update(ex.as_dict())
        if hasattr(self.drafter, "extras"):
            stats.extras.update(self.drafter.extras())


class _Counters:
    def __init__(self) -> None:
        self.steps = self.proposed = self.accepted = self.recovered = self.bonus = self.gamma_sum = 0
        self.proposed_at: list[int] = []
        self.accepted_at: list[int] = []

    def add(self, gamma: int, proposed: int, v: Verdict) -> None:
        self.steps += 1
        self.gamma_sum += gamma
        self.proposed += proposed
        self.accepted += v.accepted
        self.bonus += int(v.bonus)
        self.recovered += int(not v.bonus)
        grow = max(0, proposed - len(self.proposed_at))
        self.proposed_at += [0] * grow
        self.accepted_at += [0] * grow
        for i in range(proposed):
            self.proposed_at[i] += 1
            self.accepted_at[i] += int(i < v.accepted)

    def as_dict(self) -> dict:
        return {
            "spec_steps": self.steps,
            "spec_gamma_sum": self.gamma_sum,
            "spec_proposed": self.proposed,
            "spec_accepted": self.accepted,
            "spec_recovered": self.recovered,
            "spec_bonus": self.bonus,
            "spec_proposed_per_position": self.proposed_at,
            "spec_accepted_per_position": self.accepted_at,
        }

"""Draft-then-verify as a proposer: each step a row's drafter proposes a chain after its committed tokens and
the one shared step (:func:`fastforward.core.batching.verify_step`) verifies [last committed token + draft
tokens] in one target forward, the method's acceptance rule (:mod:`fastforward.core.acceptance`) returns how
many drafts are accepted and the target's recovered/bonus token, and the row commits them (so EOS and
max_new_tokens end exactly where AR would). The draft length comes from this module's schedules.

Counters (summed over samples by the bench; derive rates from them):
``spec_steps`` verification forwards; ``spec_proposed`` / ``spec_accepted`` draft tokens proposed /
accepted; ``spec_recovered`` / ``spec_bonus`` how each step's target token arose;
``spec_proposed_per_position`` / ``spec_accepted_per_position`` the same by draft position (lists);
``spec_gamma_sum`` the sum of per-step draft budgets (mean gamma = spec_gamma_sum / spec_steps).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from fastforward.core.acceptance import Rule
from fastforward.core.batching import Draft, Proposer, ProposerDecoder, Row, Verified
from fastforward.core.decoder import GenerationConfig
from fastforward.core.pacing import Ema, follows_times
from fastforward.decoders.speculative.drafters import DraftContext, ModelDrafter
from fastforward.decoders.speculative.lockstep import LockstepDraftProposer, lockstep_fits
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
    """Running estimates of what :func:`best_gamma` needs, and the schedule that probes a draft it turned off.

    Estimates: the acceptance rate (an exponential average of each step's accepted/proposed from an even
    prior), the draft's cost per token and the verify forward's cost per width (ms; an unseen width takes
    the nearest measured one). Cost samples go through :class:`~fastforward.core.pacing.Ema`, whose first
    sample is provisional; the draft's first sample of each request and of each probe is provisional again,
    because that step pays for the draft catching up on the context (a draft model prefills it), and one
    provisional sample alone never turns the draft off.

    When no draft length pays (a draft that is slow or rarely right on this machine and text) it returns 0
    and the step is plain AR. While off, the draft is probed as :class:`~fastforward.core.pacing.StepGate`
    probes a parallel step: a burst of ``burst`` drafted steps after ``backoff * burst * cost ratio`` AR
    steps, whose acceptance replaces the estimate and whose cost is measured afresh; a probe that still
    loses doubles the back-off (up to ``max_backoff``), one that wins turns the draft back on. A draft that
    never pays costs about its probes (~1/backoff of the steps); one that starts paying (repetitive text)
    comes back within one back-off.
    """

    PRIOR = 0.5

    def __init__(
        self, decay: float = 0.7, burst: int = 3, min_backoff: int = 8, max_backoff: int = 64
    ) -> None:
        self.decay, self.burst, self.min_backoff, self.max_backoff = decay, burst, min_backoff, max_backoff
        self.alpha = self.PRIOR
        self.draft_ms = Ema(decay)  # per draft token
        self.verify_ms: dict[int, Ema] = {}  # per width (tokens fed)
        self.backoff, self.wait = min_backoff, 0  # wait: AR steps since the last drafted one
        self.off_steps = self.probes = 0
        self.gamma_max = 1
        self._left, self._sum = 0, [0, 0]  # drafted steps left in a probe; its (proposed, accepted)
        self._cold = False  # the next drafted step pays the draft's catch-up: its cost sample is provisional
        self._at_begin = (0, 0)

    def begin(self) -> CostTracker:
        """Start a request: estimates and back-off carry over (this machine's costs; a workload's text moves
        less between its requests than relearning would cost, and a draft that is off is not even prefilled),
        the draft's next cost sample is provisional (it re-reads the prompt), :meth:`extras` counts from here."""
        self._at_begin = (self.off_steps, self.probes)
        self._cold = True
        return self

    def reopen(self) -> None:
        """Forget every estimate (a warm-up's must not decide the measured run)."""
        self.__init__(self.decay, self.burst, self.min_backoff, self.max_backoff)

    def verify_cost(self, k: int) -> float:
        known = {w: e.value for w, e in self.verify_ms.items() if e.value is not None}
        nearest = min(known, key=lambda w: (abs(w - k), w))
        return known[nearest]

    def _best(self, gamma_min: int) -> int:
        assert self.draft_ms.value is not None
        alpha = min(self.alpha, 0.99)
        return best_gamma(alpha, self.draft_ms.value, self.verify_cost, self.gamma_max, gamma_min)

    def gamma(self, current: int, gamma_max: int) -> int:
        """This step's draft length (0: a plain AR step)."""
        self.gamma_max = gamma_max
        if self.draft_ms.value is None or not self.verify_ms:
            return current  # nothing measured yet: the configured gamma
        if self._left > 0 or self.draft_ms.count < 2:
            return self._best(1)  # inside a probe, or one cold draft sample only: keep drafting
        g = self._best(0)
        if g > 0:
            return g
        g1 = self._best(1)
        ratio = max(1.0, (g1 * self.draft_ms.value + self.verify_cost(g1 + 1)) / self.verify_cost(1))
        if self.wait >= self.backoff * self.burst * ratio:
            self._left, self._sum = self.burst, [0, 0]  # a probe
            self.probes += 1
            self._cold = True  # its first step pays the draft's catch-up over the AR stretch
            return g1
        return 0

    def observe(self, proposed: int, accepted: int, draft_ms: float, verify_ms: float) -> None:
        """Record a step: draft tokens proposed and accepted, and the draft's and the verify's wall time."""
        self.verify_ms.setdefault(proposed + 1, Ema(self.decay)).add(verify_ms)
        if not proposed:  # an AR step (draft off, or it found nothing): nothing learned about the draft
            self.wait += 1
            self.off_steps += 1
            return
        self.wait = 0
        if self._cold:
            self.draft_ms.demote()
            self._cold = False
        self.draft_ms.add(draft_ms / proposed)
        if self._left <= 0:  # drafting: a running average
            self.alpha = self.decay * self.alpha + (1 - self.decay) * accepted / proposed
            return
        self._sum = [self._sum[0] + proposed, self._sum[1] + accepted]
        self._left -= 1
        if self._left == 0:  # a probe ends: its rate replaces the estimate (the text has moved on)
            self.alpha = self._sum[1] / self._sum[0]
            won = self._best(0) > 0
            self.backoff = self.min_backoff if won else min(2 * self.backoff, self.max_backoff)

    def extras(self) -> dict[str, int]:
        """This request's AR steps (draft off or empty) and probes of a draft that was off."""
        return {
            "gamma_auto_ar_steps": self.off_steps - self._at_begin[0],
            "gamma_auto_probes": self.probes - self._at_begin[1],
        }


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


class SpeculativeDecoder(ProposerDecoder):
    """Every draft-then-verify method: what differs is the drafter and the acceptance rule; the step is the
    one every method shares (:func:`fastforward.core.batching.verify_step`), so batch 1 and batches run the
    same :class:`SpecProposer`.

    ``lossless`` comes from the rule, ``needs_draft`` from whether the drafter runs a separate model."""

    def __init__(
        self,
        model: torch.nn.Module,
        drafter,
        rule: Rule,
        spec: SpecConfig,
        name: str,
        needs_draft: bool = False,
    ) -> None:
        super().__init__(model)
        spec.validate()
        self.drafter, self.rule, self.spec = drafter, rule, spec
        self.name, self.lossless, self.needs_draft = name, rule.lossless, needs_draft
        self.in_all = rule.lossless and not spec.require_sampling
        # gamma_auto's estimates, kept across requests: the costs are this machine's, and the acceptance
        # rate of a workload moves less between its requests than relearning it each time would cost
        # (a draft that does not pay here is not even prefilled on the next request)
        self.costs = CostTracker()

    def reopen_estimates(self) -> None:
        self.costs.reopen()

    def proposer(self, solo: bool) -> Proposer:
        if not solo and isinstance(self.drafter, ModelDrafter) and lockstep_fits(self.drafter, self.spec):
            return LockstepDraftProposer(self.drafter.model, self.spec.gamma, self.name, self.rule)
        return SpecProposer(self, solo)


class _SpecRow:
    """A row's drafting state: its drafter, draft length, schedule and counters."""

    __slots__ = ("costs", "counters", "draft_ms", "drafter", "gamma", "budget")

    def __init__(self, drafter: Any, costs: CostTracker | None, gamma: int) -> None:
        self.drafter, self.costs, self.gamma = drafter, costs, gamma
        self.counters = _Counters()
        self.draft_ms = 0.0
        self.budget = 0  # this step's draft length (gamma cut to the room left)


class SpecProposer(Proposer):
    """Draft-then-verify per row: each row's chain from its drafter (``propose(DraftContext)``), judged by the
    method's rule, the draft length from the schedule (fixed ``gamma``, ``adaptive`` +1/-1, or
    ``gamma_auto``'s :class:`CostTracker`).

    At batch 1 (``solo``) the row drafts with the decoder's drafter and, with ``gamma_auto``, the decoder's
    cost tracker, timed by the row's own steps and kept across requests. In a batch every row drafts with a
    drafter of its own (``drafter.fresh()``: same models, own cache or n-gram index), so every drafter
    batches (cross-tokenizer, reduced vocabulary, lookup_first, draft_stop) at the price of one draft call
    per row; ``gamma_auto`` then keeps the fixed gamma (a batch forward's time is shared by its rows, so no
    row's measured cost is its own), as seeded sampling does."""

    prunable = True  # point-mass drafts may be pruned; a sampled draft is kept whole (its residuals need it)

    def __init__(self, decoder: SpeculativeDecoder, solo: bool) -> None:
        self.decoder, self.solo = decoder, solo
        self.name, self.rule = decoder.name, decoder.rule

    def check(self, config: GenerationConfig) -> None:
        if self.decoder.spec.require_sampling and config.sampling.greedy:
            raise FastForwardError(
                f"method '{self.name}' samples: pass --temperature > 0 (use 'sd' for greedy)"
            )

    def admit(self, row: Row, prefill: Any) -> None:
        d, spec = self.decoder, self.decoder.spec
        drafter = d.drafter if self.solo else d.drafter.fresh()
        drafter.reset()
        # a schedule from measured times: only alone in the forward, and never under a seed (it must reproduce)
        timed = spec.gamma_auto and follows_times(self.solo, row.run.config.sampling)
        costs = d.costs.begin() if timed else None
        gamma = costs.gamma(spec.gamma, spec.gamma_max) if costs is not None else spec.gamma
        row.state = _SpecRow(drafter, costs, gamma)

    def propose(self, rows: Sequence[Row]) -> list[Draft]:
        drafts = []
        for row in rows:
            st: _SpecRow = row.state
            st.budget = min(st.gamma, row.room - 1)
            if row.jumped or st.budget <= 0:  # the grammar's tokens, or no room: no draft
                st.draft_ms = 0.0
                drafts.append(Draft())
                continue
            cfg = row.run.config
            t0 = time.perf_counter()
            ctx = DraftContext(row.sequence, st.budget, cfg.sampling, row.generator, cfg.eos_token_ids)
            proposal = st.drafter.propose(ctx)
            st.draft_ms = (time.perf_counter() - t0) * 1e3
            drafts.append(Draft.chain(proposal.tokens, proposal.probs))
        return drafts

    def observe(
        self, rows: Sequence[Row], drafts: Sequence[Draft], paths: Sequence[list[int]], out: Verified
    ) -> None:
        spec = self.decoder.spec
        for row, draft, path in zip(rows, drafts, paths, strict=True):
            if row.jumped:  # the drafter did not draft: nothing for it, its counters or the schedules
                continue
            st: _SpecRow = row.state
            accepted, proposed = len(path) - 1, len(draft.tokens)
            st.drafter.observe(accepted)
            st.counters.add(st.budget, proposed, accepted)
            if spec.adaptive:
                st.gamma = next_gamma(st.gamma, proposed, accepted, 1, spec.gamma_max)
            elif st.costs is not None:
                st.costs.observe(proposed, accepted, st.draft_ms, out.verify_ms)
                st.gamma = st.costs.gamma(st.gamma, spec.gamma_max)

    def row_extras(self, row: Row) -> dict[str, Any]:
        st: _SpecRow | None = row.state
        if st is None:
            return {}
        extras = st.counters.as_dict()
        if st.costs is not None:
            extras.update(st.costs.extras())
        if hasattr(st.drafter, "extras"):
            extras.update(st.drafter.extras())
        return extras


class _Counters:
    def __init__(self) -> None:
        self.steps = self.proposed = self.accepted = self.recovered = self.bonus = self.gamma_sum = 0
        self.proposed_at: list[int] = []
        self.accepted_at: list[int] = []

    def add(self, gamma: int, proposed: int, accepted: int) -> None:
        self.steps += 1
        self.gamma_sum += gamma
        self.proposed += proposed
        self.accepted += accepted
        self.bonus += int(accepted == proposed)
        self.recovered += int(accepted < proposed)
        grow = max(0, proposed - len(self.proposed_at))
        self.proposed_at += [0] * grow
        self.accepted_at += [0] * grow
        for i in range(proposed):
            self.proposed_at[i] += 1
            self.accepted_at[i] += int(i < accepted)

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

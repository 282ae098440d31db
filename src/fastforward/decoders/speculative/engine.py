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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from fastforward.core.acceptance import Rule
from fastforward.core.batching import Draft, Proposer, ProposerDecoder, Row, Verified
from fastforward.core.decoder import GenerationConfig
from fastforward.core.pacing import CostTracker, StepCost, row_policy
from fastforward.decoders.speculative.drafters import DraftContext, LookupFirstDrafter, ModelDrafter
from fastforward.decoders.speculative.lockstep import LockstepDraftProposer, lockstep_fits
from fastforward.errors import FastForwardError


def next_gamma(gamma: int, proposed: int, accepted: int, lo: int, hi: int) -> int:
    """Adaptive draft length: +1 after a full acceptance, -1 after a rejection, kept in [lo, hi]."""
    if proposed == 0:
        return gamma
    return min(hi, gamma + 1) if accepted == proposed else max(lo, gamma - 1)


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
        self.costs = CostTracker(spec.gamma)
        # lookup_first: the free lookup chains' own schedule (their acceptance is not the model's)
        self.lookup_costs = CostTracker(spec.gamma)

    def reopen_estimates(self) -> None:
        self.costs.reopen()
        self.lookup_costs.reopen()

    def proposer(self, solo: bool) -> Proposer:
        if not solo and isinstance(self.drafter, ModelDrafter) and lockstep_fits(self.drafter, self.spec):
            return LockstepDraftProposer(self.drafter.model, self.spec.gamma, self.name, self.rule)
        return SpecProposer(self, solo)


class _SpecRow:
    """A row's drafting state: its drafter, draft length, schedule and counters; with ``lookup_first`` under
    ``gamma_auto``, the lookup's own schedule and draft length beside the model's, and who drafted the step."""

    __slots__ = (
        "costs", "counters", "draft_ms", "drafter", "gamma", "budget",
        "lookup_costs", "lookup_gamma", "lookup_budget", "source", "key",
    )  # fmt: skip

    def __init__(
        self,
        drafter: Any,
        costs: CostTracker | None,
        gamma: int,
        lookup_costs: CostTracker | None = None,
        lookup_gamma: int = 0,
    ) -> None:
        self.drafter, self.costs, self.gamma = drafter, costs, gamma
        self.lookup_costs, self.lookup_gamma = lookup_costs, lookup_gamma
        self.counters = _Counters()
        self.draft_ms = 0.0
        self.budget = 0  # this step's draft length (gamma cut to the room left)
        self.lookup_budget = 0  # the lookup's, where it has a schedule of its own
        self.source = ""  # "lookup", "model" or "" (no draft) for this step
        # a keyed drafter's word on this step's draft before it runs (its schedule then chooses gamma per
        # step, CostTracker's keyed acceptance); None for a drafter that has none, or a fixed schedule
        self.key: int | None = None


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
        shared = d.costs if spec.gamma_auto else None
        costs = row_policy(self.solo, row.run.config.sampling, shared, lambda: None)  # None: the fixed gamma
        gamma = costs.choose(spec.gamma_max) if costs is not None else spec.gamma
        if costs is not None and isinstance(drafter, LookupFirstDrafter):
            # two sources, two schedules: a lookup chain costs no draft forward and is right at its own rate
            # (a timed row, since the model's schedule is timed: the decoder's shared one, begun like it)
            lookup = d.lookup_costs.begin()
            row.state = _SpecRow(drafter, costs, gamma, lookup, lookup.choose(spec.gamma_max))
        else:
            row.state = _SpecRow(drafter, costs, gamma)

    @staticmethod
    def _keyed(st: _SpecRow) -> bool:
        """Whether the row's schedule chooses each step's gamma from its drafter's key (``key(tokens)``)."""
        return st.costs is not None and st.lookup_costs is None and getattr(st.drafter, "keyed", False)

    def propose(self, rows: Sequence[Row]) -> list[Draft]:
        drafts = []
        for row in rows:
            st: _SpecRow = row.state
            if self._keyed(st) and not row.jumped:
                st.key = st.drafter.key(row.sequence)
                st.gamma = st.costs.choose(self.decoder.spec.gamma_max, st.key) if st.key else 0
            st.budget = min(st.gamma, row.room - 1)
            st.lookup_budget = min(st.lookup_gamma, row.room - 1) if st.lookup_costs is not None else 0
            st.source = ""
            if row.jumped or max(st.budget, st.lookup_budget) <= 0:  # the grammar's tokens, or no room
                st.draft_ms = 0.0
                drafts.append(Draft())
                continue
            cfg = row.run.config
            t0 = time.perf_counter()
            ctx = DraftContext(
                row.sequence,
                max(st.budget, 0),
                cfg.sampling,
                row.generator,
                cfg.eos_token_ids,
                row.room,
                row.engine,
            )
            if st.lookup_costs is not None:
                proposal, st.source = st.drafter.propose_with(ctx, st.lookup_budget)
            else:
                proposal, st.source = st.drafter.propose(ctx), "model"
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
            st.counters.add(st.lookup_budget if st.source == "lookup" else st.budget, proposed, accepted)
            if spec.adaptive:
                st.gamma = next_gamma(st.gamma, proposed, accepted, 1, spec.gamma_max)
            elif st.costs is not None:
                step = StepCost(proposed, accepted, st.draft_ms, out.verify_ms)
                if st.lookup_costs is None:
                    st.costs.observe(step, st.key)
                else:
                    observe_sources(st.costs, st.lookup_costs, st.source if proposed else "", step)
                    st.lookup_gamma = st.lookup_costs.choose(spec.gamma_max)
                if not self._keyed(st):  # a keyed row chooses when its drafter has looked (propose)
                    st.gamma = st.costs.choose(spec.gamma_max)

    def row_extras(self, row: Row) -> dict[str, Any]:
        st: _SpecRow | None = row.state
        if st is None:
            return {}
        extras = st.counters.as_dict()
        if st.costs is not None:
            extras.update(st.costs.extras())
        if hasattr(st.drafter, "extras"):
            extras.update(st.drafter.extras())
        if hasattr(st.drafter, "finish"):  # the row is through: what ran the draft, and its cache given back
            extras.update(st.drafter.finish())
        return extras


def observe_sources(model: CostTracker, lookup: CostTracker, source: str, step: StepCost) -> None:
    """One step of a ``lookup_first`` row, told to both schedules: the source that drafted learns its
    acceptance and cost from it, the other only the verify forward's cost at that width (a step it sat out);
    a step with no draft is an AR step to both."""
    if source == "lookup":
        lookup.observe(step)
        model.note_other(step.guesses + 1, step.verify_ms)
    elif source == "model":
        model.observe(step)
        lookup.note_other(step.guesses + 1, step.verify_ms)
    else:
        model.observe(step)
        lookup.observe(step)


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

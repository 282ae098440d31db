"""A plain draft model stepping every batch row in lockstep: ``gamma`` batched draft forwards per step instead
of one draft call per row (:class:`~fastforward.decoders.speculative.engine.SpecProposer`'s way, which every
drafter supports). Used for a batch when the draft is a plain model with a fixed draft length."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from fastforward.core.acceptance import EXACT, Rule
from fastforward.core.batching import Draft, Proposer, Row, Verified
from fastforward.core.engine import Block, ModelEngine
from fastforward.core.engine import prefill as prefill_row
from fastforward.core.sampling import processed_probs, sample_from


def lockstep_fits(drafter: Any, spec: Any) -> bool:
    """Whether a batch can draft for every row with batched forwards of this drafter's model: the full head
    (no reduced vocabulary, beside the model or inside it), chains that never stop early (no ``draft_stop``) and one draft length for
    every row (no ``adaptive`` schedule)."""
    full = drafter.head is None and getattr(drafter, "subset", None) is None
    return full and drafter.stop_below <= 0 and not spec.adaptive


class LockstepDraftProposer(Proposer):
    """A draft model decoding every row in lockstep, its own rows in a :class:`ModelEngine` like the
    target's (:mod:`fastforward.core.engine`): ``gamma`` batched draft forwards per step, the first feeding
    each row the committed tokens its cache lacks (the anchor, and the last accepted draft token after a
    full acceptance). After verification a row's draft cache stays valid up to its accepted drafts; the
    rest is stale and masked, overwritten by the next step."""

    name = "sd"

    def __init__(self, draft: torch.nn.Module, gamma: int, name: str = "sd", rule: Rule = EXACT) -> None:
        self.draft, self.gamma, self.name, self.rule = draft, gamma, name, rule
        self.device = next(draft.parameters()).device
        self.rows = ModelEngine(draft)  # its lengths: draft-cache slots holding each row's committed tokens
        self.fed: list[int] = []  # sequence length each row had when its last proposal was drafted

    def admit(self, row: Row, prefill: Any) -> None:
        cache, _ = prefill_row(self.draft, torch.tensor([row.request.prompt], device=self.device))
        self.rows.add(cache, len(row.request.prompt))
        self.fed.append(0)
        row.state = {"proposed": 0, "accepted": 0}

    def propose(self, rows: Sequence[Row]) -> list[Draft]:
        budgets = [min(self.gamma, row.room - 1) for row in rows]
        steps = max(budgets, default=0)
        if steps <= 0:
            return [Draft() for _ in rows]
        seqs = [row.sequence for row in rows]
        feeds = [s[n:] for s, n in zip(seqs, self.rows.lengths, strict=True)]
        sampled = not all(row.run.config.sampling.greedy for row in rows)
        tokens: list[list[int]] = [[] for _ in rows]
        probs: list[list[torch.Tensor]] = [[] for _ in rows]
        for _ in range(steps):
            out = self.rows.forward([Block.chain(f) for f in feeds], pad_id=0, hidden=False)
            self.rows.keep([list(range(len(f))) for f in feeds])
            picks = [am[-1] for am in out.argmax]  # greedy rows: the draft's top token after the feed
            if sampled:
                for b, row in enumerate(rows):
                    cfg = row.run.config.sampling
                    if not cfg.greedy:
                        q = processed_probs(out.logits[b][-1], cfg)
                        picks[b] = int(sample_from(q, row.generator))
                        probs[b].append(q)
            for b in range(len(rows)):
                tokens[b].append(int(picks[b]))
            feeds = [[t] for t in picks]
        for b, s in enumerate(seqs):
            self.fed[b] = len(s)
        drafts = []
        for b, row in enumerate(rows):
            toks = tokens[b][: max(budgets[b], 0)]
            eos = row.run.config.eos_token_ids
            cut = next((i + 1 for i, t in enumerate(toks) if t in eos), len(toks))
            toks = toks[:cut]
            p = torch.stack(probs[b][: len(toks)]) if probs[b] and toks else None
            drafts.append(Draft.chain(toks, p))
            row.state["proposed"] += len(toks)
        return drafts

    def observe(self, rows, drafts, paths, out: Verified) -> None:
        for b, (row, path) in enumerate(zip(rows, paths, strict=True)):
            accepted = len(path) - 1
            row.state["accepted"] += accepted
            if self.fed[b]:  # valid: the sequence drafted from, then the accepted drafts the draft fed
                self.rows.truncate(b, self.fed[b] + accepted)
                self.fed[b] = 0

    def retain(self, keep: Sequence[int]) -> None:
        self.fed = [self.fed[i] for i in keep]
        self.rows.retain(keep)

    def row_extras(self, row: Row) -> dict[str, Any]:
        st = row.state or {}
        return {"spec_proposed": st.get("proposed", 0), "spec_accepted": st.get("accepted", 0)}

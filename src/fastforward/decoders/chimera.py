"""Chimera decoding: the trained draft proposes a tree, the target verifies it in ONE forward.

Per step: the draft's heads give top-k candidates (:meth:`DraftState.propose`), arranged in a tree
(:mod:`fastforward.chimera.tree`): by default (``tree=auto``) the one with the most expected tokens per
millisecond given this request's acceptance so far and this machine's measured cost of a k-token forward
(on a 2-core CPU a 25-token verify costs ~2x a 1-token one, so the paper's fixed 25-node tree pays only when
acceptance is high); the target reads [root ; tree] with the tree mask and tree position ids
(:mod:`fastforward.core.masks`) through its public forward, returning logits and last hidden states; a pure
function picks the accepted path (``accept=exact``, the default and lossless: greedy tree acceptance at
temperature 0, recursive rejection sampling over the tree's point-mass candidates when sampling; lossy and
opt-in: ``accept=typical``, Medusa's rule, and ``accept=consultant``, Consultant Decoding's EMA-NLL rule on
the tree, the paper's pairing with a self-drafted tree); the KV cache keeps that path contiguously (``ModelEngine.keep``); the draft observes the target's
hidden states of the accepted nodes. Accepted counts include the bonus token the target always adds.

Options (``--opt``): ``heads=PATH`` (required, a directory saved by ``train-chimera``), ``tree=auto|default|chain``
(``default``: the static 25-node tree), ``max_nodes=31`` (auto: most drafted nodes),
``accept=exact|typical|consultant`` (``greedy`` is the old name of ``exact``), ``eps`` (typical: 0.09, consultant:
2.0), ``alpha=0.3`` (typical), ``beta=0.2`` (consultant), ``cache=16384`` (trigram LRU capacity), ``vocab=K``
(heads score only the K most frequent tokens, :mod:`fastforward.core.vocab`; the ranking saved with the heads
as ``vocab_counts.pt`` if there is one, else the shared corpus ranking; 0 = the whole vocabulary),
``lookup=K`` (0 = off): each step also looks the newest tokens up in prompt + output (prompt lookup, suffix
n-grams of ``ngram_min..ngram_max`` tokens) and grafts up to K tokens that followed their last occurrence onto
the tree as one more branch, verified in the same forward (:func:`graft_chain`). The draft's heads are weak
where text repeats itself verbatim (quoted input, lists, code, a small model's own loops) and lookup is free
there; with ``tree=auto`` the branch is taken only when its measured yield (tokens it added on earlier
steps) pays for the wider forward. Greedy stays exact and sampling lossless: the branch is point-mass
guesses judged by the same tree acceptance.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from fastforward.chimera.checkpoint import load_draft
from fastforward.chimera.model import ChimeraDraft, TrigramLRU
from fastforward.chimera.tree import (
    Tree,
    TreeSizer,
    chain_tree,
    default_tree,
    graft_chain,
    tree_tokens,
)
from fastforward.core.acceptance import ACCEPT_RULES, CONSULTANT_EPS, TYPICAL_EPS, rule_for
from fastforward.core.batching import Draft, Proposer, ProposerDecoder, Row, Verified
from fastforward.core.decoder import MissingInput
from fastforward.core.options import build_config, check_config, opt
from fastforward.core.pacing import StepCost, row_policy
from fastforward.core.vocab import COUNTS_FILE
from fastforward.data.vocab_corpus import subset_for
from fastforward.decoders.ngram import NGramIndex, check_ngram_range
from fastforward.errors import FastForwardError
from fastforward.models.costs import KS, cached_curve, interpolate, measure_curve


@dataclass(frozen=True)
class ChimeraOptions:
    heads: str = opt("", help="directory written by `fastforward train-chimera` (required)")
    tree: str = opt(
        "auto",
        choices=("auto", "default", "chain"),
        help="auto (each step's tree sized from this machine's measured k-token forward cost and the request's acceptance so far), default (the static 25-node tree) or chain",
    )
    max_nodes: int = opt(31, min=1, help="tree=auto: most drafted nodes per verify forward")
    accept: str = opt(
        "exact",
        choices=ACCEPT_RULES,
        help="exact (lossless: greedy, or rejection sampling over the tree; 'greedy' is its old name), typical or consultant (lossy)",
    )
    eps: float | None = opt(
        None,
        min=0.0,
        help="typical: cap of the acceptance threshold; consultant: bound on the EMA of the target's NLL",
        shown=f"{TYPICAL_EPS} (typical) / {CONSULTANT_EPS} (consultant)",
    )
    alpha: float = opt(0.3, min=0.0, help="entropy factor of the typical acceptance threshold")
    beta: float = opt(
        0.2, min=0.0, max=1.0, help="consultant: weight of the newest token in the EMA of the NLL"
    )
    cache: int = opt(16384, min=1, help="capacity of the trigram LRU cache")
    vocab: int = opt(0, min=0, help="heads over the K most frequent tokens (0 = whole vocabulary)")
    lookup: int = opt(
        0,
        min=0,
        help="prompt-lookup tokens grafted onto each step's tree as one more branch, verified in the same forward (0 = off; tree=auto takes the branch only where its measured yield pays)",
    )
    ngram_max: int = opt(3, min=1, help="lookup: longest suffix n-gram looked up in prompt + output")
    ngram_min: int = opt(1, min=1, help="lookup: shortest suffix n-gram")

    def validate(self) -> None:
        check_ngram_range(self.ngram_min, self.ngram_max)


# lookup branch, tree=auto: prior of the tokens a branch adds per step, how fast the estimate follows the
# request, and how fast it drifts back to the prior while branches are not taken (so they are tried again)
LOOKUP_PRIOR, LOOKUP_DECAY, LOOKUP_RELAX = 1.0, 0.8, 0.05


class ChimeraDecoder(ProposerDecoder):
    name = "chimera"
    in_all = False  # needs a draft trained for this target (--opt heads=PATH)

    def __init__(
        self,
        model: torch.nn.Module,
        draft: ChimeraDraft,
        options: ChimeraOptions,
        verify_curve: Callable[[int], float] | None = None,
    ) -> None:
        """``verify_curve``: ms of a k-token forward of ``model`` on this machine, for ``tree=auto`` (the
        per-machine cached curve from :func:`build`; measured here, uncached, on first use if not given)."""
        super().__init__(model)
        check_config(options, self.name)
        impl = getattr(model.config, "_attn_implementation", "sdpa")
        if impl and "flash" in str(impl):
            raise FastForwardError(f"chimera needs 4D tree masks; attention '{impl}' does not take them")
        self.draft, self.options = draft, options
        k = draft.cfg.num_heads
        self.tree: Tree = chain_tree(k) if options.tree == "chain" else default_tree(k)
        self.rule = rule_for(options.accept, options.eps, options.alpha, options.beta)
        self.lossless = self.rule.lossless
        # the trigram cache outlives one generation (the paper's lookup table); weights never change here
        self.trigram_cache = TrigramLRU(options.cache)
        self.verify_curve = verify_curve
        self.sizer: TreeSizer | None = None  # tree=auto's timed sizer (batch 1, unseeded), made on first use

    def proposer(self, solo: bool) -> ChimeraProposer:
        if self.options.tree == "auto" and self.sizer is None:  # the timed sizer, kept across requests
            self.sizer = self._sizer(timed=True)
        return ChimeraProposer(self, solo)

    def reopen_estimates(self) -> None:
        if self.sizer is not None:
            self.sizer.reopen()

    def _sizer(self, timed: bool = True) -> TreeSizer | None:
        """A sizer for ``tree=auto``; None for the static trees."""
        if self.options.tree != "auto":
            return None
        if self.verify_curve is None:
            self.verify_curve = interpolate(measure_curve(self.model))
        return TreeSizer(
            self.verify_curve, self.draft.cfg.num_heads, max_nodes=self.options.max_nodes, timed=timed
        )


class _ChimeraRow:
    """One request's Chimera state: the draft's state (context block, trigram cache), its tree sizer, the
    lookup branch's index and measured yield, counters, and this step's tree (read back by ``observe``)."""

    def __init__(self, state: Any, sizer: TreeSizer | None, index: NGramIndex | None, num_heads: int) -> None:
        self.state, self.sizer, self.index = state, sizer, index
        self.hits0, self.lookups0 = state.cache.hits, state.cache.lookups
        self.head_hits = [0] * num_heads
        self.accepted: list[int] = []
        self.verified = 0  # tree tokens the target read, root included
        self.gain, self.lookup_steps, self.lookup_tokens = LOOKUP_PRIOR, 0, 0
        self.tree: Tree | None = None  # this step's tree, its candidates and whether a branch was grafted
        self.top_ids: torch.Tensor | None = None
        self.chain: list[int] = []
        self.propose_ms = 0.0


class ChimeraProposer(Proposer):
    """Chimera per row: the trained draft's heads give top-k candidates, arranged in the row's tree (sized by
    the row's :class:`~fastforward.chimera.tree.TreeSizer` for ``tree=auto``: timed by the row's own steps
    when it decodes alone, batch 1, unless seeded; on the machine's cached cost curve only in a batch, where
    a forward's time is shared), with the lookup branch grafted where its yield pays; after the verify
    forward the draft observes the target's hidden states of the accepted nodes."""

    name = "chimera"
    hidden_states = True

    def __init__(self, decoder: ChimeraDecoder, solo: bool) -> None:
        self.decoder, self.solo, self.rule = decoder, solo, decoder.rule

    def admit(self, row: Row, prefill: Any) -> None:
        d, o = self.decoder, self.decoder.options
        state = d.draft.new_state(d.trigram_cache)
        # seeded sampling must reproduce: its trees (and so its random draws) follow the cached cost curve
        # and the committed tokens only, not measured times
        sizer = row_policy(self.solo, row.run.config.sampling, d.sizer, lambda: d._sizer(timed=False))
        index = NGramIndex(o.ngram_max, o.ngram_min) if o.lookup else None
        row.state = _ChimeraRow(state, sizer, index, d.draft.cfg.num_heads)
        state.observe(row.request.prompt + row.run.tokens[:1], prefill.hidden_states[-1][0])

    def propose(self, rows: Sequence[Row]) -> list[Draft]:
        d, o = self.decoder, self.decoder.options
        drafts = []
        for row in rows:
            st: _ChimeraRow = row.state
            sizer, chain = st.sizer, []
            if st.index is not None:
                st.index.extend(row.sequence)
                chain = st.index.continuation(o.lookup)
            if sizer is None:
                tree = d.tree
            else:
                tree = sizer.choose(row.room)
                rate = sizer.rate
                if chain:  # the branch only where its yield so far pays for the wider forward
                    grown = sizer.choose(row.room, len(chain), st.gain)
                    if sizer.rate > rate:
                        tree = grown
                    else:
                        chain = []
                        st.gain += LOOKUP_RELAX * (LOOKUP_PRIOR - st.gain)
            t0 = time.perf_counter()
            if sizer is None:
                top_ids, _ = st.state.propose(tree.top_k)  # [K, top_k]
            else:  # only the heads the tree reaches, every rank the sizer scores
                top_ids, _ = st.state.propose(sizer.ranks, depth=tree.max_depth)
            st.propose_ms = (time.perf_counter() - t0) * 1e3
            nodes, parents = tree_tokens(tree, row.anchor, top_ids), tree.parents
            if chain:
                nodes, parents, _ = graft_chain(nodes, parents, tree.depths, chain)
            st.tree, st.top_ids, st.chain = tree, top_ids, chain
            # candidates are point-mass drafts: exact stays lossless in distribution when sampling
            drafts.append(Draft.below(nodes, parents))
        return drafts

    def observe(
        self, rows: Sequence[Row], drafts: Sequence[Draft], paths: Sequence[list[int]], out: Verified
    ) -> None:
        num_heads = self.decoder.draft.cfg.num_heads
        for b, (row, draft, path) in enumerate(zip(rows, drafts, paths, strict=True)):
            st: _ChimeraRow = row.state
            fed = len(draft.tokens) + 1
            st.verified += fed
            if st.chain:  # tokens only the branch proposed: nodes grafted after the tree's own
                gained = sum(1 for i in path if i >= st.tree.size)
                st.lookup_steps, st.lookup_tokens = st.lookup_steps + 1, st.lookup_tokens + gained
                st.gain = LOOKUP_DECAY * st.gain + (1 - LOOKUP_DECAY) * gained
            st.accepted.append(len(path) - 1)
            for depth in range(min(len(path) - 1, num_heads)):  # a lookup branch may reach deeper
                st.head_hits[depth] += 1
            if row.run.done or row.request.error is not None:
                continue
            t0 = time.perf_counter()
            new = row.run.tokens[-len(path) :]  # the accepted nodes and the target's token, all committed
            st.state.observe(new, out.hidden[b][path])
            if st.sizer is not None:
                observe_ms = (time.perf_counter() - t0) * 1e3
                cost = StepCost(
                    guesses=fed - 1,
                    accepted=len(path) - 1,
                    propose_ms=st.propose_ms,
                    verify_ms=out.verify_ms,
                    observe_ms=observe_ms,
                    width=fed,
                    tokens=new,
                    candidates=st.top_ids.tolist(),
                )
                st.sizer.observe(cost)

    def row_extras(self, row: Row) -> dict[str, Any]:
        d, o = self.decoder, self.decoder.options
        st: _ChimeraRow | None = row.state
        if st is None:
            st = _ChimeraRow(d.draft.new_state(d.trigram_cache), None, None, d.draft.cfg.num_heads)
        num_heads = d.draft.cfg.num_heads
        hist = [0] * (max([num_heads, *st.accepted]) + 1)
        for a in st.accepted:
            hist[a] += 1
        # numbers and per-position lists only: the bench sums them over samples
        return {
            "tree": o.tree if o.tree == "auto" else f"{o.tree}:{d.tree.size}",
            "draft_steps": len(st.accepted),
            "verified_tokens": st.verified,  # / draft_steps = mean verify width
            "accepted_drafts_hist": hist,  # [d] = tree forwards that accepted d drafted tokens
            "trigram_cache_hits": st.state.cache.hits - st.hits0,
            "trigram_cache_lookups": st.state.cache.lookups - st.lookups0,
            "head_accepted": st.head_hits,  # [k] = tree forwards whose accepted path reached depth k + 1
            "lookup_steps": st.lookup_steps,  # forwards that verified a prompt-lookup branch
            "lookup_tokens": st.lookup_tokens,  # tokens accepted from nodes only that branch proposed
        }


def build(name: str, target, draft, options: dict) -> ChimeraDecoder:
    opts = build_config(ChimeraOptions, options, name)
    if not opts.heads:
        raise MissingInput(
            "chimera needs a trained draft: --opt heads=PATH (see `fastforward train-chimera`)"
        )
    draft = load_draft(opts.heads, target.model)
    if opts.vocab:
        counts = Path(opts.heads) / COUNTS_FILE
        draft.restrict_vocab(
            subset_for(target.tokenizer, opts.vocab, draft.lm_head.shape[0], target.eos_token_ids, counts)
        )
    # tree=auto sizes trees from this machine's k-token forward costs: cached per model, dtype and path
    curve = interpolate(cached_curve(target, ks=KS)) if opts.tree == "auto" else None
    return ChimeraDecoder(target.model, draft, opts, curve)


OPTIONS = ChimeraOptions

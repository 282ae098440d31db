"""Every lossless method's drafter over a batch: the proposers that :class:`fastforward.core.batching.BatchDecoder`
runs inside its one loop.

A batched method is built from the batch-1 decoder the registry builds (:func:`batched`), so the options,
their checks and their defaults are the method's own; what this module adds is only how each drafter keeps
per-row state:

| method | proposer | per-row state |
|---|---|---|
| ar | :class:`ARProposer` | none (an empty draft: one token per row per forward) |
| pld | :class:`LookupProposer` | an n-gram index of prompt + output |
| jacobi | :class:`JacobiProposer` | the block's current iterate (base or CLLM / Jacobi-Forcing-trained model) |
| sd, layerskip, qsd | :class:`DraftModelProposer` | a row of the draft model's own ragged cache |
| chimera | :class:`ChimeraProposer` | the draft's per-row state (context block KV, trigram LRU shared) |
| recycle | :class:`RecycleProposer` | the decoder's adjacency matrix, shared (a seeded row: its own); a tree sizer |
| suffix | :class:`SuffixProposer` | a suffix trie over the row's text; the scope's global trie, shared |

Every row is judged by the method's own acceptance rule (:class:`fastforward.core.acceptance.Rule`, the one
batch 1 uses; a stateful rule such as Consultant's EMA is copied per row), so the lossy rules (typical,
consultant, Chimera's ``accept=``) batch like the exact one.

Not batched (a one-line error names the batch-1 path instead): lookahead (its window and n-gram pool are one
request's 2D state; a per-row pool is possible but not built yet), sd-cross (re-tokenizes text per row),
the adaptive / cost-driven draft lengths, ``lookup_first``, a reduced-vocabulary draft head, Jacobi's
rejection recycling and multi-block decoding, and Chimera's lookup branch.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import torch

from fastforward.core.batching import BatchDecoder, Draft, Proposer, Row
from fastforward.core.decoder import Decoder
from fastforward.core.engine import Block, ModelEngine
from fastforward.core.engine import prefill as prefill_row
from fastforward.core.sampling import processed_probs, sample_from
from fastforward.errors import FastForwardError

BATCHED_METHODS = (
    "ar",
    "pld",
    "jacobi",
    "recycle",
    "suffix",
    "sd",
    "layerskip",
    "qsd",
    "typical",
    "consultant",
    "chimera",
)


class ARProposer(Proposer):
    name = "ar"

    def propose(self, rows: Sequence[Row]) -> list[Draft]:
        return [Draft() for _ in rows]


class LookupProposer(Proposer):
    """Prompt lookup per row: the continuation of the row's longest recurring suffix n-gram."""

    name = "pld"
    prunable = True

    def __init__(self, gamma: int, ngram_max: int, ngram_min: int) -> None:
        from fastforward.decoders.ngram import NGramIndex

        self.gamma, self._index = gamma, lambda: NGramIndex(ngram_max, ngram_min)

    def admit(self, row: Row, prefill: Any) -> None:
        row.state = self._index()

    def propose(self, rows: Sequence[Row]) -> list[Draft]:
        drafts = []
        for row in rows:
            row.state.extend(row.sequence)
            drafts.append(Draft.chain(row.state.continuation(min(self.gamma, row.room - 1))))
        return drafts


class JacobiProposer(Proposer):
    """Plain Jacobi decoding per row (the batch-1 loop without recycling or multi-block): a block of n
    positions starts from ``init``; each forward feeds [anchor, guess_1 .. guess_{L-1}] and the target's
    outputs after the accepted prefix are the next guess, until the block is committed."""

    name = "jacobi"

    def __init__(self, block_size: int, init: str, seed: int, pad_id: int) -> None:
        self.block_size, self.init, self.seed, self.pad_id = block_size, init, seed, pad_id

    def admit(self, row: Row, prefill: Any) -> None:
        row.state = {"guess": [], "rng": random.Random(self.seed), "blocks": 0}

    def propose(self, rows: Sequence[Row]) -> list[Draft]:
        from fastforward.decoders.jacobi import initial_guess

        drafts = []
        for row in rows:
            st = row.state
            if not st["guess"]:
                n = min(self.block_size, row.room)
                st["guess"] = initial_guess(self.init, n, row.sequence, st["rng"], self.pad_id)
                st["blocks"] += 1
            drafts.append(Draft.chain(st["guess"][:-1]))
        return drafts

    def observe(self, rows, drafts, paths, argmax, hidden) -> None:
        for b, (row, d, path) in enumerate(zip(rows, drafts, paths, strict=True)):
            outputs = argmax[b][: len(d.tokens) + 1]  # the new iterate: the target's token after every node
            row.state["guess"] = outputs[len(path) :]


class DraftModelProposer(Proposer):
    """A draft model decoding every row in lockstep, its own rows in a :class:`ModelEngine` like the
    target's (:mod:`fastforward.core.engine`): ``gamma`` batched draft forwards per step, the first feeding
    each row the committed tokens its cache lacks (the anchor, and the last accepted draft token after a
    full acceptance). After verification a row's draft cache stays valid up to its accepted drafts; the
    rest is stale and masked, overwritten by the next step."""

    name = "sd"

    def __init__(self, draft: torch.nn.Module, gamma: int, name: str = "sd") -> None:
        self.draft, self.gamma, self.name = draft, gamma, name
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

    def observe(self, rows, drafts, paths, argmax, hidden) -> None:
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


class ChimeraProposer(Proposer):
    """Chimera's trained draft per row: the heads' top-k candidates in the static tree; after the verify
    forward the row's draft state observes the target's hidden states of the accepted nodes. Every row
    verifies the same static tree (``tree=chain`` or the 25-node one, which ``tree=auto`` also falls back
    to here: batch-1 sizing from one request's acceptance does not carry over to a shared batch forward)."""

    name = "chimera"
    hidden_states = True

    def __init__(self, draft: Any, tree: Any, trigram_cache: Any) -> None:
        self.draft, self.tree, self.trigram_cache = draft, tree, trigram_cache

    def admit(self, row: Row, prefill: Any) -> None:
        row.state = self.draft.new_state(self.trigram_cache)
        row.state.observe(row.request.prompt + row.run.tokens[:1], prefill.hidden_states[-1][0])

    def propose(self, rows: Sequence[Row]) -> list[Draft]:
        from fastforward.chimera.tree import tree_tokens

        drafts = []
        for row in rows:
            top_ids, _ = row.state.propose(self.tree.top_k)
            nodes = tree_tokens(self.tree, row.anchor, top_ids)
            drafts.append(Draft(nodes[1:], [p - 1 for p in self.tree.parents[1:]]))
        return drafts

    def observe(self, rows, drafts, paths, argmax, hidden) -> None:
        for b, (row, path) in enumerate(zip(rows, paths, strict=True)):
            if row.run.done or row.request.error is not None:
                continue
            # this step committed the accepted nodes and the target's token after them, all kept
            row.state.observe(row.run.tokens[-len(path) :], hidden[b][path])


class RecycleProposer(Proposer):
    """Token Recycling per row: each row's tree grown from its anchor, from the decoder's adjacency matrix
    (shared by the rows, so one row's forwards teach the others; a seeded row keeps a matrix of its own so
    that its seed reproduces); every forward's top-k updates the rows it read.

    ``tree=static`` verifies the template every step; ``tree=auto`` (the default) gives each row its own
    :class:`~fastforward.chimera.tree.TreeSizer` on the machine's batch-1 cost curve, untimed (a batch
    forward's time is shared by rows, so no row's measured cost is its own): a row whose best tree does not
    beat an AR step on that curve feeds its anchor alone."""

    name = "recycle"
    wants_logits = True
    prunable = True

    def __init__(self, decoder: Any) -> None:
        self.decoder = decoder
        self._anchors: list[int] = []

    def _matrix(self, row: Row) -> Any:
        return row.state["matrix"] if row.state["matrix"] is not None else self.decoder.matrix

    def admit(self, row: Row, prefill: Any) -> None:
        from fastforward.decoders.recycle import Adjacency

        own = (
            Adjacency(self.decoder.vocab, self.decoder.options.topk)
            if row.run.config.sampling.seeded
            else None
        )
        row.state = {
            "matrix": own,
            "sizer": self.decoder._sizer(timed=False),
            "tree": 0,
            "ar": 0,
            "drafted": 0,
        }
        matrix = self._matrix(row)
        matrix.seed(row.request.prompt)
        matrix.update(row.request.prompt[-1:], prefill.logits[0, -1:])

    def propose(self, rows: Sequence[Row]) -> list[Draft]:
        from fastforward.decoders.recycle import expand

        self._anchors = [row.anchor for row in rows]
        drafts = []
        for row in rows:
            st, tree = row.state, self.decoder.tree
            sizer = st["sizer"]
            if sizer is not None:
                tree, rate = sizer.choose()
                if rate * (sizer.observe_ms + sizer.verify_ms(1)) < 1.0:  # no tree beats an AR step
                    drafts.append(Draft())
                    continue
            tokens, parents, _ = expand(tree, row.anchor, self._matrix(row))
            tokens, parents = tokens[: row.room], parents[: row.room]  # nodes past the cap would be cut
            drafts.append(Draft(tokens[1:], [p - 1 for p in parents[1:]]))
        return drafts

    def observe(self, rows, drafts, paths, argmax, hidden, logits=None) -> None:
        depth = self.decoder.options.depth
        for b, (row, d, path) in enumerate(zip(rows, drafts, paths, strict=True)):
            fed = [self._anchors[b], *d.tokens]
            matrix, sizer = self._matrix(row), row.state["sizer"]
            new = row.run.tokens[-len(path) :]
            # each level's row as it stood when the tree was grown (what every rank would have scored)
            seen = matrix.rows([fed[0], *new[:-1]][:depth]) if sizer is not None else []
            matrix.update(fed, logits[b][: len(fed)])
            if row.jumped:  # the grammar's forced tokens, not a recycled tree: nothing to count or size
                continue
            st = row.state
            st["tree" if d.tokens else "ar"] += 1
            st["drafted"] += len(d.tokens)
            if sizer is not None and not row.run.done:
                sizer.observe(new, seen, len(fed), 0.0, 0.0, 0.0)

    def row_extras(self, row: Row) -> dict[str, Any]:
        st = row.state or {}
        return {
            "recycle_tree_steps": st.get("tree", 0),
            "recycle_ar_steps": st.get("ar", 0),
            "recycle_drafted": st.get("drafted", 0),
        }


class SuffixProposer(Proposer):
    """SuffixDecoding per row: a suffix trie over the row's prompt and output, grown as it commits, beside the
    decoder's global trie of the request's scope (not read by a seeded row, as at batch 1); each step the
    better tree of the two, cut to the prefix that pays on the machine's batch-1 cost curve. A finished row's
    output joins its scope's global trie, so later requests (batched or not) copy from it."""

    name = "suffix"
    prunable = True

    def __init__(self, decoder: Any) -> None:
        self.decoder = decoder

    def admit(self, row: Row, prefill: Any) -> None:
        from fastforward.decoders.suffix import SuffixTrie

        d = self.decoder
        local = SuffixTrie(d.options.depth)
        for t in row.sequence:
            local.extend(t)
        cfg = row.run.config
        shared = None if cfg.sampling.seeded else d.global_tries.get(cfg.scope)
        tries = [local] if shared is None else [local, shared]
        row.state = {
            "local": local,
            "tries": tries,
            "seen": len(row.run.tokens),
            "global": int(shared is not None),
        }
        row.state.update(tree=0, ar=0, drafted=0, match=0, from_global=0)

    def propose(self, rows: Sequence[Row]) -> list[Draft]:
        from fastforward.decoders.suffix import best_prefix

        d = self.decoder
        m = d.options.max_match
        drafts = []
        for row in rows:
            st = row.state
            context = (row.request.prompt[-m:] + row.run.tokens[-m:])[-m:]
            toks, pars, scores, n_match, source = d._draft(context, st["tries"])
            n, _ = best_prefix(scores, d.verify_curve)
            n = min(n, max(row.room - 1, 0))  # a best-first prefix is still a tree
            st["pending"] = (n_match, source)  # counted in observe(), once the step's draft is known
            drafts.append(Draft(toks[:n], pars[:n]))
        return drafts

    def observe(self, rows, drafts, paths, argmax, hidden) -> None:
        for row, d in zip(rows, drafts, strict=True):
            st = row.state
            if not row.jumped:  # a jump-forward step drafted the grammar's tokens, not the trie's
                n_match, source = st.pop("pending", (0, 0))
                if d.tokens:
                    st["tree"] += 1
                    st["drafted"] += len(d.tokens)
                    st["match"] += n_match
                    st["from_global"] += source
                else:
                    st["ar"] += 1
            for t in row.run.tokens[st["seen"] :]:
                st["local"].extend(t)
            st["seen"] = len(row.run.tokens)

    def row_extras(self, row: Row) -> dict[str, Any]:
        d, run = self.decoder, row.run
        if row.request.error is None:  # a finished output becomes text later requests of its scope copy
            d.global_tries.add(run.config.scope, row.request.prompt[-d.options.max_match :] + run.tokens)
        st = row.state or {}
        return {
            "suffix_tree_steps": st.get("tree", 0),
            "suffix_ar_steps": st.get("ar", 0),
            "suffix_drafted": st.get("drafted", 0),
            "suffix_match_sum": st.get("match", 0),
            "suffix_global": st.get("global", 0),
            "suffix_from_global": st.get("from_global", 0),
        }


def batched(
    decoder: Decoder, max_batch_size: int = 8, token_budget: int = 0, layout: str = "padded"
) -> BatchDecoder:
    """The batched form of a configured batch-1 decoder (same options), or a one-line error saying why this
    configuration has none. ``layout``: how rows share a forward (:mod:`fastforward.core.ragged`)."""
    return BatchDecoder(
        decoder.model, proposer_for(decoder), max_batch_size, token_budget, decoder.lossless, layout
    )


def proposer_for(decoder: Decoder) -> Proposer:
    from fastforward.decoders.ar import ARDecoder

    name = decoder.name
    if isinstance(decoder, ARDecoder):
        return ARProposer()
    if name == "jacobi":
        c = decoder.config
        if c.pool_size or c.max_blocks > 1:
            raise FastForwardError(
                "batched jacobi runs plain Jacobi decoding: drop pool_size / max_blocks (batch 1 has them)"
            )
        return JacobiProposer(c.block_size, c.init, c.seed, decoder.pad_id)
    if name == "chimera":
        if decoder.options.lookup:
            raise FastForwardError(
                "batched chimera verifies the heads' static tree: drop lookup (batch 1 has it)"
            )
        proposer: Proposer = ChimeraProposer(decoder.draft, decoder.tree, decoder.trigram_cache)
        proposer.rule = decoder.rule
        return proposer
    if name == "recycle":
        return RecycleProposer(decoder)
    if name == "suffix":
        if decoder.verify_curve is None:
            from fastforward.models.costs import interpolate, measure_curve

            decoder.verify_curve = interpolate(measure_curve(decoder.model))
        return SuffixProposer(decoder)
    if name in ("pld", "sd", "layerskip", "qsd", "typical", "consultant"):
        proposer = _speculative(decoder)
        proposer.rule = decoder.rule
        return proposer
    raise FastForwardError(
        f"method '{name}' has no batched path (batched: {', '.join(BATCHED_METHODS)}); run it with batch size 1"
    )


def _speculative(decoder: Any) -> Proposer:
    from fastforward.decoders.speculative.drafters import ModelDrafter, PromptLookupDrafter

    spec, drafter = decoder.spec, decoder.drafter
    if spec.adaptive:  # gamma_auto (the default) is per request; a batch steps every row at the fixed gamma
        raise FastForwardError(f"batched {decoder.name} uses a fixed gamma: drop adaptive")
    if isinstance(drafter, PromptLookupDrafter):
        return LookupProposer(spec.gamma, drafter.ngram_max, drafter.ngram_min)
    if isinstance(drafter, ModelDrafter) and drafter.head is None and drafter.stop_below <= 0:
        return DraftModelProposer(drafter.model, spec.gamma, decoder.name)
    raise FastForwardError(
        f"batched {decoder.name} drafts with a plain draft model: drop vocab / draft_stop / lookup_first"
    )

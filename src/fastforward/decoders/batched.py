"""The two methods that still decode batch 1 with a loop of their own (jacobi, chimera) get their batch
proposers here, built from the configured batch-1 decoder (:func:`batched`), so the options, their checks
and their defaults are the method's own. Every other method is a proposer itself
(:class:`fastforward.core.batching.ProposerDecoder`: ar, pld, sd, sd-sample, sd-cross, layerskip, qsd,
typical, consultant, recycle, suffix), and batch 1 is its batch of one row.

| method | proposer | per-row state |
|---|---|---|
| jacobi | :class:`JacobiProposer` | the block's current iterate (base or CLLM / Jacobi-Forcing-trained model) |
| chimera | :class:`ChimeraProposer` | the draft's per-row state (context block KV, trigram LRU shared) |

Every row is judged by the method's own acceptance rule (:class:`fastforward.core.acceptance.Rule`, the one
batch 1 uses; a stateful rule such as Consultant's EMA is copied per row), so the lossy rules batch like the
exact one.

Not batched (a one-line error names the batch-1 path instead): lookahead (its window and n-gram pool are one
request's 2D state), Jacobi's rejection recycling and multi-block decoding, and Chimera's lookup branch.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from fastforward.core.batching import BatchDecoder, Draft, Proposer, ProposerDecoder, Row, Verified
from fastforward.core.decoder import Decoder
from fastforward.errors import FastForwardError

BATCHED_METHODS = (
    "ar",
    "pld",
    "jacobi",
    "recycle",
    "suffix",
    "sd",
    "sd-sample",
    "sd-cross",
    "layerskip",
    "qsd",
    "typical",
    "consultant",
    "chimera",
)


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

    def observe(self, rows, drafts, paths, out: Verified) -> None:
        for b, (row, d, path) in enumerate(zip(rows, drafts, paths, strict=True)):
            outputs = out.argmax[b][
                : len(d.tokens) + 1
            ]  # the new iterate: the target's token after every node
            row.state["guess"] = outputs[len(path) :]


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

    def observe(self, rows, drafts, paths, out: Verified) -> None:
        for b, (row, path) in enumerate(zip(rows, paths, strict=True)):
            if row.run.done or row.request.error is not None:
                continue
            # this step committed the accepted nodes and the target's token after them, all kept
            row.state.observe(row.run.tokens[-len(path) :], out.hidden[b][path])


def batched(
    decoder: Decoder, max_batch_size: int = 8, token_budget: int = 0, layout: str = "padded"
) -> BatchDecoder:
    """The batched form of a configured batch-1 decoder (same options), or a one-line error saying why this
    configuration has none. ``layout``: how rows share a forward (:mod:`fastforward.core.ragged`)."""
    return BatchDecoder(
        decoder.model, proposer_for(decoder), max_batch_size, token_budget, decoder.lossless, layout
    )


def proposer_for(decoder: Decoder) -> Proposer:
    name = decoder.name
    if isinstance(decoder, ProposerDecoder):  # the method is its proposer: batch 1 runs the same one
        return decoder.proposer(solo=False)
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
    raise FastForwardError(
        f"method '{name}' has no batched path (batched: {', '.join(BATCHED_METHODS)}); run it with batch size 1"
    )

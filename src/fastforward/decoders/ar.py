"""Plain autoregressive decoding: the baseline every speedup is divided by, so it must be fast.

One forward per token over the KV cache; the prefill computes logits only for the last position. AR is the
proposer that guesses nothing, run by the one step every method shares (batch 1 is a batch of one row), so
the baseline pays the same per-step bookkeeping as the methods divided by it. Measured here to match or beat
``model.generate()`` (see docs/results.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fastforward.core.batching import Draft, Proposer, ProposerDecoder, Row
from fastforward.core.options import build_config


@dataclass(frozen=True)
class AROptions:
    """AR takes no options; the empty dataclass makes any ``--opt`` a one-line error."""


class ARProposer(Proposer):
    """No guesses: every row feeds its anchor alone, one token per row per forward."""

    name = "ar"

    def propose(self, rows: Sequence[Row]) -> list[Draft]:
        return [Draft() for _ in rows]


class ARDecoder(ProposerDecoder):
    name = "ar"

    def proposer(self, solo: bool) -> ARProposer:
        return ARProposer()


def build(name: str, target, draft, options: dict) -> ARDecoder:
    """``ar``, or ``ar_eager``: the same AR kept off the compiled forward, which is the eager reference of a
    ``--compile on`` run (:func:`fastforward.decoders.registry.build_decoders` adds it to ``all`` only
    there; without a compiled forward it would repeat ``ar``)."""
    build_config(AROptions, options, name)
    dec = ARDecoder(target.model)
    if name == "ar_eager":
        dec.name, dec.eager, dec.in_all = name, True, False
    return dec


OPTIONS = AROptions

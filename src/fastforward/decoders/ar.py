"""Plain autoregressive decoding: the baseline every speedup is divided by, so it must be fast.

One forward per token over the KV cache; the prefill computes logits only for the last position.
Measured here to match or beat ``model.generate()`` (see docs/results.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fastforward.core.decoder import Decoder, Run
from fastforward.core.engine import Block
from fastforward.core.options import build_config
from fastforward.core.sampling import make_generator, select_token


@dataclass(frozen=True)
class AROptions:
    """AR takes no options; the empty dataclass makes any ``--opt`` a one-line error."""


class ARDecoder(Decoder):
    name = "ar"

    def _generate(self, prompt_ids: torch.Tensor, run: Run) -> None:
        sampling = run.config.sampling
        gen = make_generator(sampling, self.device)
        engine, out = self.prefill(prompt_ids, run)
        logits = out.logits[0, -1]
        while True:
            token = int(select_token(logits, sampling, gen))
            run.commit([token])
            if run.done:
                return
            logits = engine.forward([Block.chain([token])]).logits[0][-1]
            engine.keep([[0]])


def build(name: str, target, draft, options: dict) -> ARDecoder:
    build_config(AROptions, options, name)
    return ARDecoder(target.model)


OPTIONS = AROptions

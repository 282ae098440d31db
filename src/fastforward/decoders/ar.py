"""Plain autoregressive decoding: the baseline every speedup is divided by, so it must be fast.

One forward per token over the KV cache; the prefill computes logits only for the last position.
Measured here to match or beat ``model.generate()`` (see docs/results.md).
"""

from __future__ import annotations

import torch

from fastforward.core.cache import new_cache
from fastforward.core.decoder import Decoder, GenerationConfig, TokenCallback, apply_stops
from fastforward.core.sampling import make_generator, select_token
from fastforward.core.stats import DecodeStats


class ARDecoder(Decoder):
    name = "ar"
    lossless = True

    def _generate(
        self, prompt_ids: torch.Tensor, config: GenerationConfig, stats: DecodeStats, emit: TokenCallback
    ) -> list[int]:
        gen = make_generator(config.sampling, self.device)
        cache = new_cache(self.model)
        out = self.model(input_ids=prompt_ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
        position = prompt_ids.shape[1]
        tokens: list[int] = []
        while True:
            token = int(select_token(out.logits[0, -1], config.sampling, gen))
            keep, done = apply_stops(tokens, [token], config)
            tokens += keep
            stats.record_step(len(keep))
            emit(keep)
            if done:
                return tokens
            out = self.model(
                input_ids=torch.tensor([[token]], device=self.device),
                position_ids=torch.tensor([[position]], device=self.device),
                past_key_values=cache,
                use_cache=True,
            )
            position += 1


def build(name: str, target, draft, options: dict) -> ARDecoder:
    if options:
        from fastforward.errors import FastForwardError

        raise FastForwardError(f"method 'ar' takes no options, got {', '.join(options)}")
    return ARDecoder(target.model)

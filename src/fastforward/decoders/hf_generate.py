"""transformers' own ``generate()`` (greedy or sampling, optionally assisted): a peer measured in the same run.

It is not our method; it is here so that every benchmark shows how our AR baseline compares with it.
"""

from __future__ import annotations

import torch

from fastforward.core.decoder import Decoder, GenerationConfig, TokenCallback, apply_stops
from fastforward.core.stats import DecodeStats


class HFGenerateDecoder(Decoder):
    name = "hf_generate"
    lossless = True

    def __init__(self, model: torch.nn.Module, assistant: torch.nn.Module | None = None, **kw) -> None:
        super().__init__(model, **kw)
        self.assistant = assistant
        if assistant is not None:
            self.name = "hf_assisted"

    def _generate(
        self, prompt_ids: torch.Tensor, config: GenerationConfig, stats: DecodeStats, emit: TokenCallback
    ) -> list[int]:
        s = config.sampling
        kwargs: dict = {"do_sample": not s.greedy}
        if not s.greedy:
            kwargs.update(temperature=s.temperature, top_k=s.top_k or None, top_p=s.top_p)
            if s.seed is not None:
                torch.manual_seed(s.seed)
        if self.assistant is not None:
            kwargs["assistant_model"] = self.assistant
        eos = list(config.eos_token_ids) or None
        out = self.model.generate(
            prompt_ids,
            attention_mask=torch.ones_like(prompt_ids),
            max_new_tokens=config.max_new_tokens,
            eos_token_id=eos,
            pad_token_id=eos[0] if eos else None,
            **kwargs,
        )
        tokens, _ = apply_stops([], out[0, prompt_ids.shape[1] :].tolist(), config)
        # generate() reports no per-step counts; without assistance it is one forward per token.
        if self.assistant is None:
            for _ in tokens:
                stats.record_step(1)
        else:
            stats.target_forwards = 0  # unknown: generate() does not expose it
            stats.extras["target_forwards_unknown"] = True
        emit(tokens)
        return tokens


def build(name: str, target, draft, options: dict) -> HFGenerateDecoder:
    if name == "hf_assisted":
        from fastforward.decoders.speculative_checks import check_same_tokenizer

        check_same_tokenizer(target, draft)
        return HFGenerateDecoder(target.model, assistant=draft.model)
    return HFGenerateDecoder(target.model)

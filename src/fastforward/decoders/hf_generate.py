"""transformers' own ``generate()`` (greedy or sampling, optionally assisted): a peer measured in the same run.

It is not our method; it is here so that every benchmark shows how our AR baseline compares with it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fastforward.core.decoder import Decoder, Run, require_draft
from fastforward.core.options import build_config
from fastforward.decoders.speculative_checks import check_same_tokenizer


@dataclass(frozen=True)
class HFOptions:
    """generate() is run with our generation settings only; any ``--opt`` is a one-line error."""


class HFGenerateDecoder(Decoder):
    name = "hf_generate"

    def __init__(self, model: torch.nn.Module, assistant: torch.nn.Module | None = None) -> None:
        super().__init__(model)
        self.assistant = assistant
        if assistant is not None:
            self.name, self.needs_draft = "hf_assisted", True

    def _generate(self, prompt_ids: torch.Tensor, run: Run) -> None:
        config, s = run.config, run.config.sampling
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
        tokens = out[0, prompt_ids.shape[1] :].tolist()
        if self.assistant is not None:  # generate() does not expose its target forwards
            run.commit(tokens, counted=False)
            run.stats.extras["target_forwards_unknown"] = True
            return
        for t in tokens:  # unassisted it is one forward a token
            run.commit([t])
            if run.done:
                return


def build(name: str, target, draft, options: dict) -> HFGenerateDecoder:
    build_config(HFOptions, options, name)
    if name == "hf_assisted":
        require_draft(name, draft)
        check_same_tokenizer(target, draft)
        return HFGenerateDecoder(target.model, assistant=draft.model)
    return HFGenerateDecoder(target.model)


OPTIONS = HFOptions

"""transformers' own ``generate()`` (greedy or sampling, optionally assisted): a peer measured in the same run.

It is not our method; it is here so that every benchmark shows how our AR baseline compares with it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fastforward.core.decoder import Decoder, Run, require_draft
from fastforward.core.options import build_config, opt
from fastforward.decoders.speculative_checks import check_same_tokenizer


@dataclass(frozen=True)
class HFOptions:
    """generate() is run with our generation settings; hf_pld also takes ``prompt_lookup`` (its
    ``prompt_lookup_num_tokens``, transformers' default 10); any other ``--opt`` is a one-line error."""

    prompt_lookup: int = opt(
        10,
        min=1,
        help="transformers' prompt_lookup_num_tokens: tokens copied per lookup",
        used_by=("hf_pld",),
    )


class HFGenerateDecoder(Decoder):
    unconstrained_why = "transformers' generate() runs its own loop, unmasked (use 'ar' for constrained AR)"
    name = "hf_generate"

    def __init__(
        self, model: torch.nn.Module, assistant: torch.nn.Module | None = None, prompt_lookup: int = 0
    ) -> None:
        super().__init__(model)
        self.assistant, self.prompt_lookup = assistant, prompt_lookup
        if assistant is not None:
            self.name, self.needs_draft = "hf_assisted", True
        elif prompt_lookup:
            # a peer measured on request (bench --methods ...,hf_pld), not part of --methods all
            self.name, self.in_all = "hf_pld", False

    def _generate(self, prompt_ids: torch.Tensor, run: Run) -> None:
        config, s = run.config, run.config.sampling
        kwargs: dict = {"do_sample": not s.greedy}
        if not s.greedy:
            kwargs.update(temperature=s.temperature, top_k=s.top_k or None, top_p=s.top_p)
            if s.seed is not None:
                torch.manual_seed(s.seed)
        if self.assistant is not None:
            kwargs["assistant_model"] = self.assistant
        if self.prompt_lookup:
            kwargs["prompt_lookup_num_tokens"] = self.prompt_lookup
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
        if self.assistant is not None or self.prompt_lookup:  # generate() does not expose its target forwards
            run.commit(tokens, counted=False)
            run.stats.extras["target_forwards_unknown"] = True
            return
        for t in tokens:  # unassisted it is one forward a token
            run.commit([t])
            if run.done:
                return


def build(name: str, target, draft, options: dict) -> HFGenerateDecoder:
    o = build_config(HFOptions, options, name)
    if name == "hf_pld":
        return HFGenerateDecoder(target.model, prompt_lookup=o.prompt_lookup)
    if name == "hf_assisted":
        require_draft(name, draft)
        check_same_tokenizer(target, draft)
        return HFGenerateDecoder(target.model, assistant=draft.model)
    return HFGenerateDecoder(target.model)


OPTIONS = HFOptions

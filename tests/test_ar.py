"""The AR baseline: exact against transformers generate(), reproducible sampling, stop handling."""

from __future__ import annotations

import pytest
import torch

from fastforward.core.decoder import GenerationConfig, SamplingConfig, apply_stops
from fastforward.decoders.ar import ARDecoder
from fastforward.decoders.hf_generate import HFGenerateDecoder
from fastforward.decoders.registry import build_decoder
from fastforward.errors import FastForwardError

from .conftest import HALVES, greedy_config


@pytest.mark.parametrize("half", HALVES)
def test_ar_greedy_equals_hf_generate_fp32_real_prompts(smollm2, real_prompts, half):
    """4 real prompts, one of every six (4 more under the slow marker): our AR is transformers' greedy."""
    ar, hf = ARDecoder(smollm2.model), HFGenerateDecoder(smollm2.model)
    cfg = greedy_config(32, smollm2.eos_token_ids)
    for ids in real_prompts[3 * half :: 6]:
        a, h = ar.generate(ids, cfg), hf.generate(ids, cfg)
        assert a.tokens == h.tokens
        assert a.stats.new_tokens == len(a.tokens) and a.stats.mean_accepted_tokens == 1.0


def test_sampling_reproducible_with_seed_and_varies_without(smollm2, real_prompts):
    ar = ARDecoder(smollm2.model)
    cfg = GenerationConfig(
        24, smollm2.eos_token_ids, SamplingConfig(temperature=1.0, top_k=50, top_p=0.95, seed=7)
    )
    a, b = ar.generate(real_prompts[0], cfg), ar.generate(real_prompts[0], cfg)
    assert a.tokens == b.tokens
    other = GenerationConfig(24, smollm2.eos_token_ids, SamplingConfig(temperature=1.0, seed=8))
    assert ar.generate(real_prompts[0], other).tokens != a.tokens


def test_max_new_tokens_respected_and_eos_stops(tiny):
    ar = ARDecoder(tiny.model)
    out = ar.generate([1, 2, 3], greedy_config(7))
    assert len(out.tokens) == 7 and out.stats.target_forwards == 7
    first = out.tokens[2]
    stopped = ar.generate([1, 2, 3], greedy_config(7, eos=(first,)))
    assert stopped.tokens == out.tokens[: out.tokens.index(first) + 1]


def test_streaming_callback_sees_every_token(tiny):
    seen: list[int] = []
    out = ARDecoder(tiny.model).generate([5, 6], greedy_config(9), on_tokens=seen.extend)
    assert seen == out.tokens


def test_apply_stops_cuts_at_eos_and_cap():
    cfg = GenerationConfig(max_new_tokens=5, eos_token_ids=(9,))
    assert apply_stops([1, 2], [3, 9, 4], cfg) == ([3, 9], True)
    assert apply_stops([1, 2], [3, 4, 5, 6], cfg) == ([3, 4, 5], True)
    assert apply_stops([], [3], cfg) == ([3], False)


@pytest.mark.parametrize(
    "cfg",
    [
        GenerationConfig(max_new_tokens=0),
        GenerationConfig(sampling=SamplingConfig(temperature=-1)),
        GenerationConfig(sampling=SamplingConfig(temperature=1, top_p=0)),
    ],
)
def test_bad_generation_config_is_a_clear_error(tiny, cfg):
    with pytest.raises(FastForwardError):
        ARDecoder(tiny.model).generate([1, 2], cfg)


def test_prompt_longer_than_context_is_a_clear_error(tiny):
    with pytest.raises(FastForwardError, match="context length"):
        ARDecoder(tiny.model).generate(list(range(1, 500)), greedy_config(64))


def test_empty_prompt_is_a_clear_error(tiny):
    with pytest.raises(FastForwardError, match="empty"):
        ARDecoder(tiny.model).generate(torch.zeros(0, dtype=torch.long), greedy_config(4))


def test_hf_pld_peer_equals_ar_greedy(smollm2, real_prompts):
    """transformers' prompt lookup (generate with prompt_lookup_num_tokens) is lossless under greedy too."""
    config = GenerationConfig(max_new_tokens=32, eos_token_ids=smollm2.eos_token_ids)
    ar = build_decoder("ar", smollm2)
    peer = build_decoder("hf_pld", smollm2, options={"prompt_lookup": 4})
    assert peer.name == "hf_pld" and not peer.in_all
    for ids in real_prompts[:3]:
        assert peer.generate(ids, config).tokens == ar.generate(ids, config).tokens

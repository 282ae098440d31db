"""Log-probabilities of committed tokens (``GenerationConfig.logprobs``): every method, batched or not, reports
for each token what greedy AR reports, taken from the verify forward that scored it; AR's own equal an
independent full forward over prompt + output. The server's OpenAI shapes are in tests/test_serve.py."""

from __future__ import annotations

import pytest
import torch

from fastforward.chimera.train import new_draft
from fastforward.core.batching import batched
from fastforward.core.decoder import GenerationConfig
from fastforward.core.logprobs import Emitted
from fastforward.decoders.ar import ARDecoder
from fastforward.decoders.chimera import ChimeraDecoder, ChimeraOptions
from fastforward.decoders.registry import build_decoder
from fastforward.errors import FastForwardError

from .conftest import make_tiny

PROMPTS = [[5, 6, 7, 8, 5, 6, 7, 8, 5, 6], [11, 12, 13, 11, 12, 13, 11], list(range(20, 40))]
TOP = 3


@pytest.fixture(scope="module")
def tiny():
    return make_tiny()


def _close(got, ref, atol: float) -> None:
    assert len(got) == len(ref)
    for g, r in zip(got, ref, strict=True):
        assert g is not None and g.token == r.token
        assert abs(g.logprob - r.logprob) <= atol, (g, r)
        assert [t for t, _ in g.top] == [t for t, _ in r.top]
        assert all(abs(a - b) <= atol for (_, a), (_, b) in zip(g.top, r.top, strict=True))


def test_ar_logprobs_equal_a_full_forward_and_stream_with_the_tokens(tiny) -> None:
    cfg = GenerationConfig(24, logprobs=TOP)
    seen: list = []
    out = ARDecoder(tiny.model).generate(PROMPTS[0], cfg, on_tokens=lambda ids: seen.append(ids))
    assert all(isinstance(e, Emitted) for e in seen)
    assert [x for e in seen for x in e.logprobs] == out.logprobs
    ids = torch.tensor([PROMPTS[0] + out.tokens])
    with torch.inference_mode():
        lsm = tiny.model(input_ids=ids).logits[0, len(PROMPTS[0]) - 1 : -1].float().log_softmax(-1)
    for i, e in enumerate(out.logprobs):
        assert e.token == out.tokens[i]
        assert abs(e.logprob - float(lsm[i, e.token])) < 1e-4
        assert [t for t, _ in e.top] == lsm[i].topk(TOP).indices.tolist()
    assert ARDecoder(tiny.model).generate(PROMPTS[0], GenerationConfig(4)).logprobs is None


def test_every_method_reports_ar_logprobs_batched_or_not(tiny) -> None:
    m = tiny.model
    cfg = GenerationConfig(24, logprobs=TOP)
    ref = [ARDecoder(m).generate(p, cfg) for p in PROMPTS]
    decoders = {
        "pld": build_decoder("pld", tiny, None, {"gamma": 4, "ngram_max": 2}),
        "sd": build_decoder("sd", tiny, tiny, {}),  # the target drafting for itself: long accepted chains
        "jacobi": build_decoder("jacobi", tiny, None, {"block_size": 5, "gate": "off"}),
        "lookahead": build_decoder("lookahead", tiny, None, {"window": 3, "ngram": 3, "gate": "off"}),
        "recycle": build_decoder("recycle", tiny, None, {"tree": "static"}),
        "suffix": build_decoder("suffix", tiny, None, {"min_score": 0.0}),
        "chimera": ChimeraDecoder(m, new_draft(m), ChimeraOptions()),
    }
    for name, dec in decoders.items():
        for p, r in zip(PROMPTS, ref, strict=True):
            out = dec.generate(p, cfg)
            assert out.tokens == r.tokens, name
            _close(out.logprobs, r.logprobs, 1e-4)
        try:
            bd = batched(dec, max_batch_size=2)
        except FastForwardError:
            continue
        for req, r in zip(bd.generate_many(PROMPTS, cfg), ref, strict=True):
            _close(req.result.logprobs, r.logprobs, 1e-4)


def test_logprobs_out_of_range_and_hf_generate_are_refused(tiny) -> None:
    with pytest.raises(FastForwardError, match="logprobs must be in"):
        ARDecoder(tiny.model).generate(PROMPTS[0], GenerationConfig(4, logprobs=21))
    with pytest.raises(FastForwardError, match="cannot return logprobs"):
        build_decoder("hf_generate", tiny, None, {}).generate(PROMPTS[0], GenerationConfig(4, logprobs=0))


def test_real_prompt_logprobs_of_parallel_methods_equal_ar(smollm2, real_prompts) -> None:
    """fp32 SmolLM2, default schedules: a wide verify forward's log-probabilities equal AR's one-token ones
    up to rounding."""
    cfg = GenerationConfig(32, smollm2.eos_token_ids, logprobs=2)
    ref = ARDecoder(smollm2.model).generate(real_prompts[16], cfg)
    for method in ("pld", "recycle", "suffix", "lookahead"):
        out = build_decoder(method, smollm2, None, {}).generate(real_prompts[16], cfg)
        assert out.tokens == ref.tokens
        _close(out.logprobs, ref.logprobs, 2e-3)

"""sd-cross: a draft with a tokenizer of its own (universal assisted generation), exact under greedy.

The boundary rule is tested on the real SmolLM2 tokenizer; the end-to-end cases run the real SmolLM2 target
in fp32 with (a) itself as a "foreign" draft through the text path (high acceptance, so committed drafts are
exercised) and (b) a tiny random model behind a byte-level BPE tokenizer trained here on a few sentences
(different vocabulary and segmentation: proposals are mostly rejected, outputs must still equal AR)."""

from __future__ import annotations

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from tokenizers import decoders as tok_decoders
from transformers import PreTrainedTokenizerFast

from fastforward.core.decoder import GenerationConfig, SamplingConfig
from fastforward.decoders.registry import build_decoder
from fastforward.decoders.speculative.drafters import retokenize_continuation
from fastforward.errors import FastForwardError
from fastforward.models.loading import LoadedModel

from .conftest import make_tiny


def test_retokenize_continuation_appends_whole_tokens_and_refuses_boundary_merges(smollm2) -> None:
    tok = smollm2.tokenizer
    tail = tok("The answer is", add_special_tokens=False)["input_ids"]
    assert (
        retokenize_continuation(tok, tail, " 42 apples")
        == tok(" 42 apples", add_special_tokens=False)["input_ids"]
    )
    word = tok("Hello wor", add_special_tokens=False)["input_ids"]
    merged = tok("Hello world", add_special_tokens=False)["input_ids"]
    assert merged[: len(word)] != word  # "wor" + "ld" re-tokenizes as one token: the tail would change
    assert retokenize_continuation(tok, word, "ld") == []
    assert retokenize_continuation(tok, tail, "") == []


def _foreign_tokenizer() -> PreTrainedTokenizerFast:
    text = [
        "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May.",
        "def add(a, b):\n    return a + b\n",
        "The quick brown fox jumps over the lazy dog. Answer: 72",
    ] * 20
    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = tok_decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    raw.train_from_iterator(text, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="<|endoftext|>")


@pytest.mark.parametrize("foreign", [False, True])
def test_sd_cross_equals_greedy_ar_on_smollm2(smollm2, real_prompts, foreign: bool) -> None:
    if foreign:
        tok = _foreign_tokenizer()
        tiny = make_tiny(vocab=len(tok), seed=3)
        draft = LoadedModel("tiny-bpe", tiny.path, tiny.model, tok, "float32")
    else:
        draft = smollm2
    dec = build_decoder("sd-cross", smollm2, draft, {"gamma": 4, "gamma_auto": False})
    ar = build_decoder("ar", smollm2, None, {})
    config = GenerationConfig(max_new_tokens=32, eos_token_ids=smollm2.eos_token_ids)
    proposed = accepted = 0
    for ids in real_prompts[:3]:
        got = dec.generate(ids, config)
        assert got.tokens == ar.generate(ids, config).tokens
        proposed += got.stats.extras["spec_proposed"]
        accepted += got.stats.extras["spec_accepted"]
    assert proposed > 0
    if not foreign:
        assert accepted > proposed // 2  # the same model through text: most drafts survive re-tokenization


def test_sd_points_to_sd_cross_and_sd_cross_samples(smollm2, real_prompts) -> None:
    """Re-tokenized drafts are point masses: under sampling they are verified by rejection sampling with
    q = one-hot (the rule pld uses; its distribution test is in tests/test_sampling_methods.py)."""
    tok = _foreign_tokenizer()
    tiny = make_tiny(vocab=len(tok), seed=3)
    draft = LoadedModel("tiny-bpe", tiny.path, tiny.model, tok, "float32")
    with pytest.raises(FastForwardError, match="sd-cross"):
        build_decoder("sd", smollm2, draft, {})
    dec = build_decoder("sd-cross", smollm2, smollm2, {"gamma": 4})  # the same model, through text
    config = GenerationConfig(
        max_new_tokens=24, eos_token_ids=(), sampling=SamplingConfig(temperature=0.7, seed=0)
    )
    got = dec.generate(real_prompts[0], config)
    assert len(got.tokens) == 24 and got.stats.extras["spec_accepted"] > 0
    assert dec.generate(real_prompts[0], config).tokens == got.tokens

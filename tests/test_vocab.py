"""Reduced-vocabulary draft heads (``vocab=K``): the ranking, the restricted head, and that exact methods stay
exact (the target verifies over the whole vocabulary). The sampling case is in
test_sd_sampling_distribution.py."""

from __future__ import annotations

import copy

import pytest
import torch

from fastforward.core.acceptance import EXACT
from fastforward.core.decoder import GenerationConfig, SamplingConfig
from fastforward.core.vocab import (
    RestrictedHead,
    VocabSubset,
    count_ids,
    head_weight,
    rank_subset,
)
from fastforward.data.vocab_corpus import subset_for
from fastforward.decoders.registry import build_decoder
from fastforward.decoders.speculative.drafters import DraftContext, ModelDrafter, head_inside
from fastforward.decoders.speculative.engine import SpecConfig, SpeculativeDecoder
from fastforward.decoders.speculative.lockstep import lockstep_fits
from fastforward.errors import FastForwardError

from .conftest import greedy_config, make_tiny


def test_count_ids_ignores_ids_outside_the_vocabulary() -> None:
    counts = count_ids([[1, 2, 2, 9], [2, -1, 3]], vocab_size=5)
    assert counts.tolist() == [0, 1, 3, 1, 0]


def test_rank_subset_takes_the_most_frequent_breaks_ties_by_id_and_keeps_forced_ids() -> None:
    counts = torch.tensor([5, 0, 7, 5, 1, 5])
    assert rank_subset(counts, 2).ids.tolist() == [0, 2]  # 7, then the smaller id among the 5s
    assert rank_subset(counts, 3).ids.tolist() == [0, 2, 3]
    sub = rank_subset(counts, 3, always=[1])  # id 1 never occurs but must be draftable (an EOS)
    assert sub.ids.tolist() == [0, 1, 2] and sub.vocab_size == 6
    with pytest.raises(FastForwardError, match="smaller than"):
        rank_subset(counts, 1, always=[1, 4])
    with pytest.raises(FastForwardError, match=">= 1"):
        rank_subset(counts, 0)


def test_subset_maps_positions_to_ids_and_expands_distributions_with_zeros() -> None:
    sub = VocabSubset(torch.tensor([1, 4, 6]), 8)
    assert sub.to_full(torch.tensor([2, 0])).tolist() == [6, 1]
    q = torch.tensor([[0.5, 0.25, 0.25]])
    full = sub.expand(q)
    assert full.shape == (1, 8)
    assert full[0].tolist() == [0, 0.5, 0, 0, 0.25, 0, 0.25, 0]


def test_restricted_head_scores_exactly_the_subset_rows_of_the_full_head() -> None:
    torch.manual_seed(0)
    full = torch.nn.Linear(16, 10)
    sub = VocabSubset(torch.tensor([0, 3, 9]), 10)
    head = RestrictedHead(full.weight, full.bias, sub)
    h = torch.randn(2, 16)
    torch.testing.assert_close(head(h), full(h)[:, [0, 3, 9]])
    with pytest.raises(FastForwardError, match="rows"):
        RestrictedHead(full.weight, None, VocabSubset(torch.tensor([0]), 11))


def test_head_weight_falls_back_to_tied_embeddings_and_refuses_released_heads() -> None:
    tiny = make_tiny()
    assert head_weight(tiny.model)[0] is tiny.model.lm_head.weight
    tiny.model.lm_head.weight = None  # what a kernel path that released an untied head leaves
    with pytest.raises(FastForwardError, match="--path default"):
        head_weight(tiny.model)
    tiny.model.config.tie_word_embeddings = True
    assert head_weight(tiny.model)[0] is tiny.model.get_input_embeddings().weight


def test_subset_for_returns_none_for_the_whole_vocabulary_and_reads_a_saved_ranking(tmp_path) -> None:
    assert subset_for(None, 0, 100) is None
    assert subset_for(None, 100, 100) is None
    path = tmp_path / "vocab_counts.pt"
    torch.save(torch.tensor([0, 9, 1, 8, 2]), path)
    assert subset_for(None, 2, 5, always=(4,), counts_file=path).ids.tolist() == [1, 4]
    with pytest.raises(FastForwardError, match="counts 5 ids"):
        subset_for(None, 2, 7, counts_file=path)
    path.write_bytes(b"not a tensor file")
    with pytest.raises(FastForwardError, match="cannot read"):
        subset_for(None, 2, 5, counts_file=path)


def _tiny_sd(vocab_ids: list[int] | None, gamma: int = 4) -> tuple[SpeculativeDecoder, object]:
    target, draft = make_tiny(seed=0), make_tiny(seed=1)
    head = None
    if vocab_ids is not None:
        head = RestrictedHead(draft.model.lm_head.weight, None, VocabSubset(torch.tensor(vocab_ids), 512))
    drafter = ModelDrafter(draft.model, 0.0, head)
    decoder = SpeculativeDecoder(target.model, drafter, EXACT, SpecConfig(gamma=gamma), "sd")
    return decoder, target


def test_reduced_vocabulary_drafts_stay_inside_the_subset() -> None:
    decoder, _ = _tiny_sd(list(range(0, 512, 3)))
    drafter = decoder.drafter
    for sampling, gen in (
        (SamplingConfig(), None),
        (SamplingConfig(1.0, seed=0), torch.Generator().manual_seed(0)),
    ):
        drafter.reset()
        prop = drafter.propose(DraftContext([5, 7, 11, 13], 6, sampling, gen))
        assert len(prop.tokens) == 6 and all(t % 3 == 0 for t in prop.tokens), prop.tokens
        if prop.probs is not None:
            assert prop.probs.shape == (6, 512)
            outside = prop.probs[:, [i for i in range(512) if i % 3]]
            assert float(outside.abs().sum()) == 0.0
            torch.testing.assert_close(prop.probs.sum(-1), torch.ones(6))


def test_a_head_inside_the_draft_proposes_what_the_same_head_beside_it_does() -> None:
    """head_inside makes the restricted head the draft's own LM head: the same guesses and distributions as
    the head run beside the draft's decoder, mapped to full ids; and such a draft never runs lockstep in a
    batch (lockstep reads the model's logits as full-vocabulary ids)."""
    beside, _ = _tiny_sd(list(range(1, 512, 3)))
    model = copy.deepcopy(beside.drafter.model)
    inside = ModelDrafter(model, 0.0, subset=head_inside(model, copy.deepcopy(beside.drafter.head)))
    assert inside.head is None and model.lm_head.linear.out_features == len(range(1, 512, 3))
    for sampling, seed in ((SamplingConfig(), None), (SamplingConfig(1.0, seed=0), 0)):
        props = []
        for drafter in (beside.drafter, inside):
            drafter.reset()
            gen = None if seed is None else torch.Generator().manual_seed(seed)
            props.append(drafter.propose(DraftContext([5, 7, 11, 13], 6, sampling, gen)))
        assert props[0].tokens == props[1].tokens and all(t % 3 == 1 for t in props[1].tokens)
        if props[0].probs is not None:
            torch.testing.assert_close(props[0].probs, props[1].probs)
    assert not lockstep_fits(inside, SpecConfig(gamma=4))
    assert lockstep_fits(ModelDrafter(model), SpecConfig(gamma=4))


@pytest.mark.parametrize("vocab_ids", [list(range(0, 512, 2)), list(range(256))])
def test_greedy_sd_with_a_reduced_draft_vocabulary_equals_ar(vocab_ids: list[int]) -> None:
    decoder, target = _tiny_sd(vocab_ids)
    ar = build_decoder("ar", target, None, {})
    prompt = [3, 17, 42, 99, 7, 256, 311]
    want = ar.generate(prompt, greedy_config(40)).tokens
    got = decoder.generate(prompt, greedy_config(40))
    assert got.tokens == want
    assert got.stats.extras["spec_proposed"] > 0


@pytest.mark.parametrize(("method", "extra"), [("layerskip", {"layers": 12}), ("qsd", {"bits": 8})])
def test_reduced_vocabulary_self_drafts_are_exact_on_smollm2(smollm2, real_prompts, method, extra) -> None:
    """Real SmolLM2 in fp32: the 4096-token draft head (81-88% of corpus tokens) drafts, the target's
    verification keeps every output identical to greedy AR."""
    ar = build_decoder("ar", smollm2, None, {})
    dec = build_decoder(method, smollm2, None, {"vocab": 4096, "gamma": 4, "gamma_auto": False, **extra})
    # the head is the draft's own (head_inside): it drafts through one forward, on the target's cache
    inner = dec.drafter.model  # the model drafter, behind the default lookup_first
    assert inner.head is None and inner.subset.size == 4096
    assert inner.shared_layers == len(inner.model.model.layers)
    config = GenerationConfig(max_new_tokens=32, eos_token_ids=smollm2.eos_token_ids)
    accepted = 0
    for ids in real_prompts[:3]:
        got = dec.generate(ids, config)
        assert got.tokens == ar.generate(ids, config).tokens
        accepted += got.stats.extras["spec_accepted"]
    assert accepted > 0

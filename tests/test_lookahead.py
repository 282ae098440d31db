"""Lookahead decoding: equal to greedy AR token for token, the n-gram pool's LRU rules, the step's tree layout,
greedy verification on hand-made outputs, and a cache that keeps only accepted entries."""

from __future__ import annotations

import pytest

from fastforward.core.acceptance import accept_tree, fan_parents
from fastforward.core.decoder import GenerationConfig, SamplingConfig
from fastforward.core.masks import tree_depths, tree_visibility
from fastforward.decoders.lookahead import (
    LookaheadConfig,
    LookaheadDecoder,
    NGramPool,
    step_layout,
    window_ngrams,
)
from fastforward.decoders.registry import build_decoder
from fastforward.errors import FastForwardError

from .conftest import HALVES, greedy_config, make_tiny
from .test_jacobi import Spy, ar_reference

# --------------------------------------------------------------------------- pure parts


def test_pool_keeps_most_recent_continuations_per_first_token():
    pool = NGramPool(max_keys=10, per_key=2)
    pool.add([1, 2, 3])
    pool.add([1, 4, 5])
    pool.add([1, 6, 7])  # evicts (2, 3)
    assert pool.candidates(1, 5) == [(6, 7), (4, 5)]
    pool.add([1, 4, 5])  # re-adding refreshes
    assert pool.candidates(1, 1) == [(4, 5)]
    assert pool.candidates(9, 3) == [] and len(pool) == 2


def test_pool_evicts_least_recently_used_first_token():
    pool = NGramPool(max_keys=2, per_key=4)
    pool.add([1, 2])
    pool.add([3, 4])
    pool.candidates(1, 1)  # a lookup counts as use
    pool.add([5, 6])  # evicts key 3
    assert pool.candidates(3, 1) == [] and pool.candidates(1, 1) == [(2,)] and pool.candidates(5, 1) == [(6,)]


def test_pooled_candidates_are_judged_as_chains_from_the_anchor():
    """lookahead's verification is tree acceptance over [anchor] + candidate chains (one acceptance module)."""
    cands = [(5, 6, 9), (5, 6, 7), (8, 1, 1)]
    # the target's chain: after anchor 5, after 5 -> 6, after 6 -> 7, after 7 -> 4
    outs = [[6, 7, 0], [6, 7, 4], [0, 0, 0]]
    parents = fan_parents([3, 3, 3])
    tokens = [0] + [t for c in cands for t in c]

    def judge(anchor_next: int, outputs: list[list[int]]) -> list[int]:
        return accept_tree(tokens, parents, [anchor_next] + [t for o in outputs for t in o])

    assert judge(5, outs) == [0, 4, 5, 6]  # candidate 1, all three tokens; bonus = its last output (4)
    assert judge(2, outs) == [0]  # nothing matches: only the target's own token
    assert accept_tree([0], [-1], [3]) == [0]
    assert accept_tree([0, 5, 6, 9], fan_parents([3]), [5, 6, 8, 0]) == [0, 1, 2]


def test_step_layout_is_the_lookahead_tree():
    w, rows, cands, n1 = 3, 2, 2, 3
    parents = step_layout(rows, w, cands, n1)
    vis, depths = tree_visibility(parents), tree_depths(parents)
    assert len(parents) == 1 + rows * w + cands * n1
    # row r, column i sits at relative position 1 + r + i
    assert depths[1 : 1 + rows * w] == [1 + r + i for r in range(rows) for i in range(w)]
    # row 1, column 2 sees the anchor, row 0 columns 0..2 and itself
    assert vis[1 + w + 2].nonzero().flatten().tolist() == [0, 1, 2, 3, 1 + w + 2]
    # candidate chains see the anchor and their own earlier tokens only
    base = 1 + rows * w
    assert vis[base + n1 + 2].nonzero().flatten().tolist() == [0, base + n1, base + n1 + 1, base + n1 + 2]
    assert depths[base:] == [1, 2, 3, 1, 2, 3]


def test_window_ngrams_are_columns_plus_new_output():
    assert window_ngrams([[1, 2], [3, 4]], [5, 6]) == [[1, 3, 5], [2, 4, 6]]


@pytest.mark.parametrize(
    "options,match",
    [
        ({"window": 0}, "window"),
        ({"N": 1}, "ngram"),
        ({"G": 0}, "candidates"),
        ({"pool_size": 0}, "pool_size"),
        ({"window": 2.5}, "window"),
        ({"lookahead": 3}, "unknown option"),
    ],
)
def test_invalid_options_are_clear_errors(options, match):
    with pytest.raises(FastForwardError, match=match):
        build_decoder("lookahead", make_tiny(), None, options)


def test_sampling_runs_to_the_length_cap_and_is_seeded():
    """Sampling is lossless in distribution (tests/test_sampling_methods.py); here: the loop's bookkeeping."""
    dec = LookaheadDecoder(make_tiny().model)
    cfg = GenerationConfig(12, sampling=SamplingConfig(temperature=1.0, seed=1))
    res = dec.generate([1, 2, 3, 1, 2, 3, 1, 2], cfg)
    assert len(res.tokens) == 12 and sum(res.stats.accepted_per_step) == 12
    assert dec.generate([1, 2, 3, 1, 2, 3, 1, 2], cfg).tokens == res.tokens


# --------------------------------------------------------------------------- decoder on tiny models


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("w,n,g", [(1, 2, 1), (4, 4, 4), (3, 5, 2)])
def test_tiny_models_equal_greedy_ar(arch, w, n, g):
    tiny = make_tiny(arch)
    dec = LookaheadDecoder(tiny.model, LookaheadConfig(window=w, ngram=n, candidates=g))
    # a repetitive prompt gives the pool something to offer
    for prompt in ([1, 2, 3, 4, 1, 2, 3, 4, 1, 2], [7, 8, 9]):
        out = dec.generate(prompt, greedy_config(25))
        assert out.tokens == ar_reference(tiny.model, prompt, 25)
        ex = out.stats.extras  # lookahead steps and the gate's AR steps: one target forward each
        assert out.stats.target_forwards == 1 + ex["steps"] + ex["gate_ar_steps"]


def test_cache_keeps_only_accepted_entries():
    tiny = make_tiny("llama")
    spy = Spy(tiny.model)
    out = LookaheadDecoder(spy, LookaheadConfig(window=3, ngram=3, candidates=3)).generate(
        [4, 5, 6, 4, 5, 6, 4, 5], greedy_config(20)
    )
    prefill, *steps = spy.calls
    committed = 1
    for (cache_len, first_pos, _k), n in zip(steps, out.stats.accepted_per_step[1:], strict=True):
        assert cache_len == first_pos == 8 + committed - 1  # prompt + committed tokens, minus the anchor
        committed += n
    assert committed == len(out.tokens) == 20


def test_eos_inside_accepted_ngram_stops_where_ar_does():
    tiny = make_tiny("qwen2")
    prompt = [3, 9, 3, 9, 3, 9, 3]
    full = ar_reference(tiny.model, prompt, 30)
    for cut in (2, 7, 13):
        eos = (full[cut],)
        got = LookaheadDecoder(tiny.model).generate(prompt, greedy_config(30, eos))
        assert got.tokens == ar_reference(tiny.model, prompt, 30, eos)


# --------------------------------------------------------------------------- real model


# slow: covered by default in tests/test_defaults_exact.py (the default gate and a random gate schedule)
@pytest.mark.slow
@pytest.mark.parametrize("half", HALVES)
def test_lookahead_equals_greedy_ar_fp32_real_prompts(smollm2, real_prompts, half):
    """12 real prompts (the other 12 under the slow marker)."""
    dec = build_decoder("lookahead", smollm2, None, {"gate": "off"})  # counts pool hits
    eos = smollm2.eos_token_ids
    forwards = tokens = from_pool = 0
    for ids in real_prompts[half::2]:
        out = dec.generate(ids, greedy_config(21, eos))
        assert out.tokens == ar_reference(smollm2.model, ids, 21, eos)
        forwards += out.stats.target_forwards
        tokens += out.stats.new_tokens
        from_pool += out.stats.extras["accepted_from_pool"]
    assert from_pool > 0 and tokens / forwards > 1.1  # the pool does contribute on real text


def test_lookahead_real_model_eos_mid_step(smollm2, real_prompts):
    ids = real_prompts[3]
    full = ar_reference(smollm2.model, ids, 21, smollm2.eos_token_ids)
    eos = (full[10],)
    got = LookaheadDecoder(smollm2.model).generate(ids, greedy_config(21, eos))
    assert got.tokens == ar_reference(smollm2.model, ids, 21, eos)


def test_pool_seeding_from_prompt_is_optional(smollm2, real_prompts):
    ids = real_prompts[16]  # HumanEval: code that the answer repeats
    on = LookaheadDecoder(smollm2.model, LookaheadConfig(prompt_ngrams=True)).generate(ids, greedy_config(21))
    off = LookaheadDecoder(smollm2.model, LookaheadConfig(prompt_ngrams=False)).generate(
        ids, greedy_config(21)
    )
    assert on.tokens == off.tokens == ar_reference(smollm2.model, ids, 21)


def test_output_ngrams_pool_what_the_newest_tokens_complete():
    from fastforward.decoders.lookahead import add_output_ngrams

    pool = NGramPool(100, 4)
    add_output_ngrams(pool, [1, 2, 3], [4, 5], 2, 3)  # prompt and output read as one text
    assert pool.candidates(2, 4) == [(3, 4)] and pool.candidates(3, 4) == [(4, 5)]
    short = NGramPool(100, 4)
    add_output_ngrams(short, [1], [4, 5], 2, 3)  # the first would start before the prompt: skipped
    assert short.candidates(1, 4) == [(4, 5)] and len(short) == 1

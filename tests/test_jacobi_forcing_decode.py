"""Jacobi's Jacobi-Forcing decoding options: rejection recycling (``pool_size``) and multi-block decoding
(``max_blocks``, ``spawn_ratio``). Greedy output must stay token-for-token AR (tiny fp32 models, EOS inside a
block, lengths that are no multiple of the block; real SmolLM2 prompts), the options must actually fire
(candidates fed and accepted, blocks spawned), the cache must hold exactly the committed prefix, and
sampling must follow the target's exact distribution (chi-square, as tests/test_sampling_methods.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from fastforward.core.decoder import GenerationConfig, SamplingConfig
from fastforward.decoders.jacobi import (
    JacobiConfig,
    JacobiDecoder,
    branch_iterate,
    guess_tree,
    pool_continuations,
    spawn_threshold,
)
from fastforward.decoders.registry import build_decoder
from fastforward.errors import FastForwardError
from fastforward.eval import distribution

from .conftest import greedy_config, make_tiny
from .test_jacobi import Spy, ar_reference
from .test_tree_sampling import break_tree_rule

PROMPTS = ([1, 2, 3], [7, 8, 9, 10, 11, 3, 4], [5, 6, 7, 5, 6, 7, 5, 6], [3, 4])
# (pool_size, max_blocks, spawn_ratio): recycling alone, multi-block alone (spawning early and late), both
OPTIONS = [(1, 1, 0.85), (4, 1, 0.85), (0, 2, 0.5), (0, 2, 0.0), (1, 2, 0.5), (4, 2, 0.85), (4, 3, 0.0)]


@pytest.fixture(autouse=True, scope="module")
def _one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _config(block_size: int, pool: int, blocks: int, ratio: float, **kw) -> JacobiConfig:
    if blocks > 1 and spawn_threshold(ratio, block_size) >= block_size:
        ratio = 0.5  # r = 0.85 cannot spawn in a block of 4 (ceil(3.4) = 4): refused, tested below
    kw.setdefault("gate", "off")  # every step a block step: these tests count what the blocks do
    return JacobiConfig(block_size=block_size, pool_size=pool, max_blocks=blocks, spawn_ratio=ratio, **kw)


# --------------------------------------------------------------------------- pure functions


def test_pool_continuations_take_the_suffix_after_the_first_occurrence():
    pool = [[4, 1, 2, 3, 1, 9], [7, 8], [5, 1, 6]]
    assert list(pool_continuations(reversed(pool), 1, 3)) == [[6], [2, 3, 1]]  # newest first, cropped
    assert list(pool_continuations(pool, 8, 3)) == []  # 8 ends its entry: nothing follows it
    assert list(pool_continuations(pool, 42, 3)) == []


def test_guess_tree_merges_candidates_into_one_prefix_tree():
    tokens, parents, branches = guess_tree(9, [1, 2, 3], [[1, 2, 3], [1, 5], [7], [1, 5, 6], [8]], limit=3)
    # the guess is the chain 1..3; [1, 2, 3] duplicates it (dropped); [1, 5] shares node 1; [7] is new;
    # [1, 5, 6] extends [1, 5]'s branch; [8] is past the limit of 3 candidates
    assert tokens == [9, 1, 2, 3, 5, 7, 6]
    assert parents == [-1, 0, 1, 2, 1, 0, 4]
    assert branches == [[1, 2, 3], [1, 4], [5], [1, 4, 6]]
    assert guess_tree(9, [], [[1]], limit=2) == ([9, 1], [-1, 0], [[], [1]])


def test_branch_iterate_reads_the_accepted_branch_and_pads_with_the_guess():
    _, _, branches = guess_tree(9, [1, 2, 3], [[1, 5]], limit=1)
    outputs = [10, 11, 12, 13, 14]  # the target's token after nodes 0..4
    assert branch_iterate(branches, [0, 1, 2], outputs) == [10, 11, 12, 13]  # on the guess
    assert branch_iterate(branches, [0, 1, 4], outputs) == [10, 11, 14, 13]  # on [1, 5], padded
    assert branch_iterate(branches, [0], outputs) == [10, 11, 12, 13]  # shared root: the guess first


def test_spawn_threshold_rounds_up():
    assert [spawn_threshold(r, 16) for r in (0.0, 0.5, 0.85, 1.0)] == [0, 8, 14, 16]
    assert spawn_threshold(0.7, 10) == 7  # not 8 from 0.7 * 10 = 7.000000000000001


# --------------------------------------------------------------------------- options


def test_options_are_checked_and_blocks_is_an_alias():
    tiny = make_tiny()
    dec = build_decoder("jacobi", tiny, None, {"blocks": 2, "block_size": 8, "pool_size": 2})
    assert (dec.config.max_blocks, dec.config.pool_size, dec.config.spawn_ratio) == (2, 2, 0.85)
    for options, match in [
        ({"pool_size": -1}, "pool_size must be an integer >= 0"),
        ({"max_blocks": 0}, "max_blocks must be an integer >= 1"),
        ({"spawn_ratio": 1.5}, r"spawn_ratio must be a number in \[0.0, 1.0\]"),
        ({"blocks": 2, "block_size": 4}, "would never spawn a block"),  # ceil(0.85 * 4) = 4
    ]:
        with pytest.raises(FastForwardError, match=match) as err:
            build_decoder("jacobi", tiny, None, options)
        assert "\n" not in str(err.value)


def test_default_options_add_no_stats():
    tiny = make_tiny()
    plain = JacobiDecoder(tiny.model, JacobiConfig(block_size=4)).generate([1, 2, 3], greedy_config(13))
    assert "tokens_fed" not in plain.stats.extras and "fast_forward_tokens" in plain.stats.extras
    on = JacobiDecoder(tiny.model, JacobiConfig(block_size=4, pool_size=1)).generate(
        [1, 2, 3], greedy_config(13)
    )
    assert {"tokens_fed", "pool_candidates", "recycled_tokens", "recycle_steps", "spawned_blocks"} <= set(
        on.stats.extras
    )


# --------------------------------------------------------------------------- exact greedy on tiny models


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("block_size", [4, 8])
@pytest.mark.parametrize(("pool", "blocks", "ratio"), OPTIONS)
def test_tiny_models_equal_greedy_ar(arch, block_size, pool, blocks, ratio):
    tiny = make_tiny(arch)
    dec = JacobiDecoder(tiny.model, _config(block_size, pool, blocks, ratio))
    candidates = spawned = 0
    for prompt in PROMPTS:
        out = dec.generate(prompt, greedy_config(23))  # 23 = prefill + 22: no multiple of 4 or 8
        assert out.tokens == ar_reference(tiny.model, prompt, 23)
        ex = out.stats.extras
        assert out.stats.target_forwards == 1 + ex["iterations"]
        assert ex["recycled_tokens"] >= ex["recycle_steps"]
        candidates += ex["pool_candidates"]
        spawned += ex["spawned_blocks"]
    assert (candidates > 0) == (pool > 0) and (spawned > 0) == (blocks > 1), (candidates, spawned)


@pytest.mark.parametrize(("pool", "blocks", "ratio"), [(4, 1, 0.85), (0, 2, 0.5), (2, 2, 0.5)])
def test_eos_inside_a_block_stops_where_ar_does(pool, blocks, ratio):
    tiny = make_tiny("qwen2")
    full = ar_reference(tiny.model, [5, 6, 7], 30)
    for cut in (4, 9, 17):  # inside the first, second and third block of 8
        eos = (full[cut],)
        want = ar_reference(tiny.model, [5, 6, 7], 30, eos)
        got = JacobiDecoder(tiny.model, _config(8, pool, blocks, ratio)).generate(
            [5, 6, 7], greedy_config(30, eos)
        )
        assert got.tokens == want and got.tokens[-1] == full[cut]


def test_recycling_fires_and_accepts_pooled_tokens():
    """Candidates are fed and some are accepted beyond what the guess gave, and the output stays AR's."""
    tiny = make_tiny("llama")
    fed = recycled = 0
    for block_size in (4, 8):
        dec = JacobiDecoder(tiny.model, JacobiConfig(block_size=block_size, pool_size=4, gate="off"))
        for prompt in PROMPTS:
            out = dec.generate(prompt, greedy_config(40))
            assert out.tokens == ar_reference(tiny.model, prompt, 40)
            fed += out.stats.extras["pool_candidates"]
            recycled += out.stats.extras["recycled_tokens"]
    assert fed > 0 and recycled > 0, (fed, recycled)


def test_multi_block_spawns_and_feeds_the_pseudo_blocks():
    tiny = make_tiny("llama")
    spy = Spy(tiny.model)
    dec = JacobiDecoder(spy, JacobiConfig(block_size=8, max_blocks=2, spawn_ratio=0.5, record=True))
    out = dec.generate([1, 2, 3], greedy_config(40))
    assert out.tokens == ar_reference(tiny.model, [1, 2, 3], 40)
    ex = out.stats.extras
    assert ex["spawned_blocks"] > 0
    # some forward is wider than one block: anchor + RA's rest + a pseudo block
    assert max(k for *_, k in spy.calls[1:]) > 8
    assert ex["tokens_fed"] == sum(k for *_, k in spy.calls[1:])
    blocks = dec.last_trajectory
    assert sum((b.fixed_point for b in blocks), []) == out.tokens[1:]
    assert all(len(it) == len(b.iterates[0]) for b in blocks for it in b.iterates)
    assert ex["blocks"] == len(blocks) and "fast_forward_tokens" not in ex  # measures are per-forward blocks


@pytest.mark.parametrize(("pool", "blocks"), [(4, 1), (2, 2)])
def test_cache_holds_exactly_the_committed_prefix_before_every_forward(pool, blocks):
    tiny = make_tiny("llama")
    spy = Spy(tiny.model)
    dec = JacobiDecoder(spy, JacobiConfig(block_size=4, pool_size=pool, max_blocks=blocks, spawn_ratio=0.5))
    prompt = [5, 6, 7, 5, 6, 7, 5, 6]
    out = dec.generate(prompt, greedy_config(33))
    assert out.tokens == ar_reference(tiny.model, prompt, 33)
    committed = 1
    for (cache_len, first_pos, _k), n in zip(spy.calls[1:], out.stats.accepted_per_step[1:], strict=True):
        assert cache_len == first_pos == len(prompt) + committed - 1
        committed += n


# --------------------------------------------------------------------------- real model


def test_real_smollm2_fp32_equals_greedy_ar_with_both_options(smollm2, real_prompts):
    """A GSM8K, an MT-bench and a HumanEval prompt, 48 tokens, recycling and two blocks in flight."""
    torch.set_num_threads(1)
    eos = smollm2.eos_token_ids
    dec = build_decoder("jacobi", smollm2, None, {"pool_size": 2, "blocks": 2})
    fed = spawned = 0
    for ids in (real_prompts[0], real_prompts[8], real_prompts[16]):
        out = dec.generate(ids, greedy_config(48, eos))
        assert out.tokens == ar_reference(smollm2.model, ids, 48, eos)
        fed += out.stats.extras["pool_candidates"]
        spawned += out.stats.extras["spawned_blocks"]
    assert fed > 0 and spawned > 0


# --------------------------------------------------------------------------- sampling

SAMPLING_PROMPT = [1, 5, 3, 7, 1, 5, 3, 2, 1, 5, 3]  # repeats: the pool finds continuations
SAMPLED_TOKENS = 5  # x1 from the prefill; a block of 3 and a pseudo block of 1 after it
N_SAMPLES = 2000
ALPHA = 1e-3


@pytest.fixture(scope="module")
def sharp():
    return distribution.tiny_target(12, 0, 3.0)


def _sampler(model) -> JacobiDecoder:
    return JacobiDecoder(model, JacobiConfig(block_size=3, pool_size=2, max_blocks=2, spawn_ratio=0.0))


def _pvalues(model, decoder, n) -> tuple[list[float], list[dict]]:
    cfg = SamplingConfig(temperature=1.0)
    joint = distribution.exact_joint(model, cfg, SAMPLING_PROMPT, SAMPLED_TOKENS)
    samples, extras = distribution.sample_runs(decoder, cfg, SAMPLING_PROMPT, n, SAMPLED_TOKENS)
    assert all(joint[tuple(s)] > 0 for s in samples)
    return [t.p_value for t in distribution.pair_tests(samples, joint)], extras


def test_sampling_with_both_options_follows_the_target_distribution(sharp):
    pvalues, extras = _pvalues(sharp.model, _sampler(sharp.model), N_SAMPLES)
    steps = [n for e in extras for n in e["committed_per_step"][1:]]
    assert sum(n > 1 for n in steps) >= N_SAMPLES // 20 and sum(n == 1 for n in steps) >= N_SAMPLES // 20
    assert sum(e["spawned_blocks"] for e in extras) >= N_SAMPLES // 2
    assert sum(e["recycle_steps"] for e in extras) >= 20  # accepted paths through pooled candidates
    assert min(pvalues) > ALPHA, pvalues
    seeded = GenerationConfig(24, (), SamplingConfig(temperature=1.0, seed=7))
    dec = _sampler(sharp.model)
    assert dec.generate(SAMPLING_PROMPT, seeded).tokens == dec.generate(SAMPLING_PROMPT, seeded).tokens


def test_the_sampling_check_rejects_a_wrong_verifier(sharp, monkeypatch):
    break_tree_rule(monkeypatch)
    pvalues, _ = _pvalues(sharp.model, _sampler(sharp.model), N_SAMPLES // 2)
    assert min(pvalues) < ALPHA, f"a wrong verifier passed (p-values {pvalues}): the check has no power"

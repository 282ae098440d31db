"""Jacobi decoding: token-for-token equal to greedy AR, exact stops, cache cropped to the committed prefix,
and the CLLM trajectory measures on hand-made trajectories."""

from __future__ import annotations

import pytest
import torch

from fastforward.core.acceptance import common_prefix
from fastforward.core.decoder import GenerationConfig, SamplingConfig
from fastforward.decoders.jacobi import (
    JacobiConfig,
    JacobiDecoder,
    block_measures,
    converged_prefix,
    fast_forward_counts,
    initial_guess,
    stationary_positions,
)
from fastforward.decoders.registry import build_decoder
from fastforward.errors import FastForwardError
from fastforward.models.loading import is_pulled, load_model

from .conftest import HALVES, TEST_THREADS, greedy_ar, greedy_config, make_tiny


def ar_reference(model: torch.nn.Module, prompt, n: int, eos: tuple[int, ...] = ()) -> list[int]:
    """Greedy AR tokens, computed once per session (:func:`conftest.greedy_ar`), shared with test_lookahead."""
    return greedy_ar(model, prompt, n, eos)


class Spy(torch.nn.Module):
    """Wraps a model and records (cache length, first position id, input length) of every forward."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner, self.config, self.calls = inner, inner.config, []

    def forward(self, **kw):
        pos = kw.get("position_ids")
        first = int(pos[0, 0]) if pos is not None else 0
        self.calls.append((int(kw["past_key_values"].get_seq_length()), first, kw["input_ids"].shape[1]))
        return self.inner(**kw)


# --------------------------------------------------------------------------- pure functions


def test_converged_prefix_first_token_always_right():
    assert converged_prefix([9, 9, 9], [1, 2, 3]) == 1
    assert converged_prefix([1, 9, 9], [1, 2, 3]) == 2
    assert converged_prefix([1, 2, 9], [1, 2, 3]) == 3  # new[2] was computed from right guesses
    assert converged_prefix([1, 2, 3], [1, 2, 3]) == 3
    assert converged_prefix([], []) == 0
    assert common_prefix([1, 2, 3], [1, 2, 4]) == 2


def test_fast_forward_counts_and_stationary_tokens_on_hand_made_trajectory():
    fp = [1, 2, 3, 4, 5]
    iterates = [
        [9, 9, 9, 9, 9],  # initial guess
        [1, 9, 3, 9, 5],  # +1 (AR's token); 3 and 5 right ahead of a wrong token
        [1, 2, 3, 9, 5],  # +2: fast-forward; 5 stays
        [1, 2, 3, 4, 5],  # +2
        [1, 2, 3, 4, 5],  # verification forward: not an iteration towards the fixed point
    ]
    assert fast_forward_counts(iterates, fp) == [1, 2, 2]
    assert stationary_positions(iterates, fp) == [2, 4]


def test_a_right_token_that_later_changes_is_not_stationary():
    fp = [1, 2, 3]
    iterates = [[0, 0, 0], [1, 0, 3], [1, 2, 7], [1, 2, 3]]
    assert fast_forward_counts(iterates, fp) == [1, 1, 1]
    assert stationary_positions(iterates, fp) == []
    # right in the initial guess and never changed: stationary from iteration 1 on
    assert stationary_positions([[0, 0, 3], [1, 0, 3], [1, 2, 3]], fp) == [2]


def test_plain_ar_like_trajectory_has_one_token_per_iteration_and_no_stationary():
    fp = [4, 5, 6, 7]
    iterates = [[0] * 4] + [fp[:k] + [0] * (4 - k) for k in range(1, 5)]
    assert fast_forward_counts(iterates, fp) == [1, 1, 1, 1]
    assert stationary_positions(iterates, fp) == []


def test_initial_guess_modes_are_seeded_and_draw_from_history():
    import random

    hist = [10, 11, 12, 13]
    a = initial_guess("random", 6, hist, random.Random(0), pad_id=0)
    assert a == initial_guess("random", 6, hist, random.Random(0), pad_id=0)
    assert set(a) <= set(hist) and len(a) == 6
    assert initial_guess("repeat", 3, hist, random.Random(0), pad_id=0) == [13, 13, 13]
    assert initial_guess("pad", 2, hist, random.Random(0), pad_id=7) == [7, 7]


# --------------------------------------------------------------------------- decoder on tiny models


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("block_size,init", [(1, "random"), (3, "repeat"), (16, "random"), (5, "pad")])
def test_tiny_models_equal_greedy_ar(arch, block_size, init):
    tiny = make_tiny(arch)
    dec = JacobiDecoder(tiny.model, JacobiConfig(block_size=block_size, init=init))
    for prompt in ([1, 2, 3], [7, 8, 9, 10, 11, 3, 4]):
        out = dec.generate(prompt, greedy_config(23))
        assert out.tokens == ar_reference(tiny.model, prompt, 23)
        assert out.stats.target_forwards == 1 + out.stats.extras["iterations"]


def test_cache_holds_exactly_the_committed_prefix_before_every_forward():
    tiny = make_tiny("qwen2")
    spy = Spy(tiny.model)
    dec = JacobiDecoder(spy, JacobiConfig(block_size=4, record=True))
    out = dec.generate([3, 4, 5, 6], greedy_config(13))
    prefill, *steps = spy.calls
    assert prefill == (0, 0, 4)
    committed = 1
    for (cache_len, first_pos, _k), n in zip(steps, out.stats.accepted_per_step[1:], strict=True):
        assert cache_len == first_pos == 4 + committed - 1  # prompt + committed, minus the anchor
        committed += n
    # every block forward covers only its unconverged positions
    for b in dec.last_trajectory:
        sizes = [len(b.iterates[0]) - sum(b.committed[:i]) for i in range(len(b.committed))]
        assert sizes == [k for *_, k in steps[: len(sizes)]]
        steps = steps[len(sizes) :]


def test_recorded_trajectory_is_consistent_with_output():
    tiny = make_tiny("llama")
    dec = JacobiDecoder(tiny.model, JacobiConfig(block_size=5, record=True))
    out = dec.generate([1, 2, 3], greedy_config(14))
    blocks = dec.last_trajectory
    assert [len(b.fixed_point) for b in blocks] == [5, 5, 3]  # 1 (prefill) + 5 + 5 + 3 = 14
    assert sum((b.fixed_point for b in blocks), []) == out.tokens[1:]
    for b in blocks:
        assert all(len(it) == len(b.iterates[0]) for it in b.iterates)
        assert b.iterates[-1] == b.fixed_point and sum(b.committed) == len(b.fixed_point)
        ff, _ = block_measures(b)
        assert all(f >= 1 for f in ff)
    assert JacobiDecoder(tiny.model, JacobiConfig(block_size=5)).generate([1, 2, 3], greedy_config(4))
    ex = out.stats.extras
    assert ex["blocks"] == 3 and ex["iterations"] == out.stats.target_forwards - 1
    assert sum(k * c for k, c in enumerate(ex["fast_forward_hist"])) == ex["fast_forward_tokens"]


def test_eos_inside_a_block_stops_where_ar_does():
    tiny = make_tiny("qwen2")
    full = ar_reference(tiny.model, [5, 6, 7], 30)
    for cut in (4, 9, 17):  # inside the first, second and third block of 8
        eos = (full[cut],)
        want = ar_reference(tiny.model, [5, 6, 7], 30, eos)
        got = JacobiDecoder(tiny.model, JacobiConfig(block_size=8)).generate(
            [5, 6, 7], greedy_config(30, eos)
        )
        assert got.tokens == want and got.tokens[-1] == full[cut]


@pytest.mark.parametrize(
    "options,match",
    [
        ({"block_size": 0}, "block_size"),
        ({"block_size": -3}, "block_size"),
        ({"init": "zeros"}, "init"),
        ({"blocksize": 4}, "unknown option"),
    ],
)
def test_invalid_options_are_clear_errors(options, match):
    with pytest.raises(FastForwardError, match=match):
        build_decoder("jacobi", make_tiny(), None, options)


def test_sampling_commits_every_token_and_skips_the_fixed_point_measures():
    """Sampling is lossless in distribution (tests/test_sampling_methods.py); here: the loop's bookkeeping."""
    dec = JacobiDecoder(make_tiny().model, JacobiConfig(block_size=4))
    res = dec.generate([1, 2], GenerationConfig(9, sampling=SamplingConfig(temperature=1.0, seed=1)))
    assert len(res.tokens) == 9 and sum(res.stats.accepted_per_step) == 9
    assert res.stats.extras["blocks"] == 2  # after the prefill's token: blocks of 4 + 4
    assert "fast_forward_tokens" not in res.stats.extras


# --------------------------------------------------------------------------- real model


# slow: real-prompt Jacobi exactness runs by default in tests/test_defaults_exact.py (the default gate and a
# random gate schedule, so parallel steps too); this fixed-schedule pass is the heavier duplicate (44 s)
@pytest.mark.slow
@pytest.mark.parametrize("half", HALVES)
def test_jacobi_equals_greedy_ar_fp32_real_prompts(smollm2, real_prompts, half):
    """12 real prompts (the other 12 under the slow marker); 21 new tokens = prefill + one block of 16 + a cut
    block of 4."""
    dec = build_decoder("jacobi", smollm2, None, {"gate": "off"})  # counts fast-forwards
    eos = smollm2.eos_token_ids
    forwards = tokens = 0
    for ids in real_prompts[half::2]:
        out = dec.generate(ids, greedy_config(21, eos))
        assert out.tokens == ar_reference(smollm2.model, ids, 21, eos)
        forwards += out.stats.target_forwards
        tokens += out.stats.new_tokens
    assert 1.0 < tokens / forwards < 2.0  # a base model fast-forwards a little, not much


def test_jacobi_real_model_eos_inside_block(smollm2, real_prompts):
    ids = real_prompts[0]
    full = ar_reference(smollm2.model, ids, 21, smollm2.eos_token_ids)
    eos = (full[11],)
    want = ar_reference(smollm2.model, ids, 21, eos)
    got = JacobiDecoder(smollm2.model, JacobiConfig(block_size=16)).generate(ids, greedy_config(21, eos))
    assert got.tokens == want and len(got.tokens) <= 12


@pytest.mark.slow
def test_gemma3_equals_greedy_ar():
    if not is_pulled("gemma3-270m"):
        pytest.skip("gemma3-270m is not converted in $FASTFORWARD_CACHE")
    gemma = load_model("gemma3-270m", "float32", threads=TEST_THREADS)
    ids = gemma.tokenizer("The capital of France is")["input_ids"]
    dec = JacobiDecoder(gemma.model, JacobiConfig(block_size=8))
    assert dec.generate(ids, greedy_config(30)).tokens == ar_reference(gemma.model, ids, 30)

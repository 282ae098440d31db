"""Exactness of what users run: every lossless method with its default schedule (the step gate, gamma_auto)
on real SmolLM2 prompts in fp32, and forced mixed schedules (a seeded coin for the gate, random draft
lengths 0 included) on the same prompts. The method-specific tests pin fixed schedules where they count
mechanics; these check that the schedules a user gets by default never change a greedy token.

One decoder serves all prompts, as in a server or a bench, so the estimates carried across requests (and
the AR stretches and probes they cause) are part of what is checked.
"""

from __future__ import annotations

import random

import pytest

from fastforward.core.pacing import CostTracker, StepGate
from fastforward.decoders.registry import build_decoder

from .conftest import greedy_ar, greedy_config
from .test_pacing import _RandomSchedule

N_TOKENS = 24


@pytest.fixture(scope="module")
def prompts(real_prompts) -> list[list[int]]:
    """GSM8K held-out, two MT-bench, HumanEval."""
    return [real_prompts[i] for i in (0, 8, 9, 16)]


@pytest.fixture(scope="module")
def reference(smollm2, prompts) -> list[list[int]]:
    return [greedy_ar(smollm2.model, ids, N_TOKENS, smollm2.eos_token_ids) for ids in prompts]


@pytest.mark.parametrize(
    "method", ["jacobi", "lookahead", "pld", "recycle", "suffix", "layerskip", "qsd", "sd"]
)
def test_every_lossless_method_with_its_default_schedule_equals_ar(smollm2, prompts, reference, method):
    draft = smollm2 if method == "sd" else None  # a draft of the same model: a cheap, always-right draft
    dec = build_decoder(method, smollm2, draft, {})
    assert dec.lossless
    cfg = greedy_config(N_TOKENS, smollm2.eos_token_ids)
    for ids, ref in zip(prompts, reference, strict=True):
        assert dec.generate(ids, cfg).tokens == ref


@pytest.mark.parametrize(
    ("method", "options"),
    [  # the wide-step methods run batch 3 by default in test_batching.py; every method here in the slow set
        ("pld", {}),
        ("recycle", {}),
        ("suffix", {}),
        pytest.param("jacobi", {}, marks=pytest.mark.slow),
        pytest.param("lookahead", {}, marks=pytest.mark.slow),
        pytest.param("pld", {"gamma_auto": False, "adaptive": True}, marks=pytest.mark.slow),
        pytest.param("recycle", {"tree": "static"}, marks=pytest.mark.slow),
        pytest.param("layerskip", {}, marks=pytest.mark.slow),
        pytest.param("qsd", {}, marks=pytest.mark.slow),
        pytest.param("sd", {}, marks=pytest.mark.slow),
    ],
)
def test_every_lossless_method_batched_four_rows_equals_ar(smollm2, prompts, reference, method, options):
    """Batch 1 is a batch of one row of the same step, so the same methods, default or fixed schedules, give
    greedy AR's tokens with the four real prompts decoded together (ragged rows, per-row drafters and trees)."""
    from fastforward.core.batching import batched

    draft = smollm2 if method == "sd" else None
    bd = batched(build_decoder(method, smollm2, draft, options), max_batch_size=4)
    reqs = bd.generate_many(prompts, greedy_config(N_TOKENS, smollm2.eos_token_ids))
    assert [r.result.tokens for r in reqs] == reference
    assert bd.stats.max_rows == 4


def test_recycle_with_every_step_a_tree_on_real_prompts_equals_ar(smollm2, prompts, reference):
    """The static template: every step whose anchor has a row verifies a tree (the default sizes trees by
    this machine's costs and may take AR steps); one decoder, so later prompts read a matrix the earlier
    ones filled."""
    dec = build_decoder("recycle", smollm2, None, {"tree": "static"})
    outs = _equal_to_ar(dec, smollm2, prompts, reference)
    assert sum(sum(o.stats.extras["recycle_accepted_hist"][1:]) for o in outs) > 0


def _equal_to_ar(dec, smollm2, prompts, reference) -> list:
    """Every prompt's generation, each asserted equal to greedy AR; the results for the stats checks."""
    cfg = greedy_config(N_TOKENS, smollm2.eos_token_ids)
    outs = [dec.generate(ids, cfg) for ids in prompts]
    for out, ref in zip(outs, reference, strict=True):
        assert out.tokens == ref
    return outs


@pytest.mark.parametrize("method", ["jacobi", "lookahead"])
def test_a_random_gate_schedule_on_real_prompts_equals_ar(monkeypatch, smollm2, prompts, reference, method):
    made: list[_RandomSchedule] = []

    def gate(**_: object) -> StepGate:
        made.append(_RandomSchedule(len(made)))
        return made[-1]

    monkeypatch.setattr(f"fastforward.decoders.{method}.StepGate", gate)
    outs = _equal_to_ar(build_decoder(method, smollm2, None, {}), smollm2, prompts, reference)
    mixed = sum(out.stats.ar_steps > 0 and out.stats.parallel_steps > 0 for out in outs)
    assert made and mixed >= len(prompts) - 1  # the schedules did mix both kinds of step


@pytest.mark.parametrize("method", ["pld", "layerskip"])
def test_random_draft_lengths_on_real_prompts_equal_ar(monkeypatch, smollm2, prompts, reference, method):
    rng = random.Random(7)
    monkeypatch.setattr(CostTracker, "choose", lambda self, limit, key=None: rng.randint(0, 6))
    outs = _equal_to_ar(build_decoder(method, smollm2, None, {}), smollm2, prompts, reference)
    assert sum(out.stats.ar_steps for out in outs) > 0

"""What ran: every decode forward is counted by its width, so AR fallback steps are visible in each record,
in the totals, and in the per-sample records a bench stores."""

from __future__ import annotations

import pytest

from fastforward.core.decoder import GenerationConfig
from fastforward.core.metrics import DecodeTotals, generation_record, record_totals
from fastforward.core.stats import DecodeStats
from fastforward.decoders.registry import build_decoder

from .conftest import make_tiny


def test_widths_leave_out_the_prefill_and_split_ar_from_parallel_steps() -> None:
    s = DecodeStats("m")
    s.record_step(1, width=40)  # the prefill: the prompt's width, not a step's
    for committed, width in [(1, 1), (3, 5), (1, 1), (2, 5)]:
        s.record_step(committed, width)
    assert s.width_hist == [0, 2, 0, 0, 0, 2]
    assert (s.ar_steps, s.parallel_steps, s.drafted_tokens, s.ar_step_share) == (2, 2, 8, 0.5)
    d = s.to_dict()
    assert d["ar_steps"] == 2 and d["ar_step_share"] == 0.5
    assert "2 of 4 steps plain AR" in s.summary()
    totals = DecodeTotals()
    totals.add(s)
    totals.add(s)
    assert (totals.ar_steps, totals.parallel_steps, totals.ar_step_share) == (4, 4, 0.5)
    assert totals.width_hist == [0, 4, 0, 0, 0, 4] and totals.mean_width == 3.0
    again = record_totals([generation_record(s, None), {"new_tokens": 1, "wall_time_s": 0.1,
                                                        "target_forwards": 1, "identical_to_ar": None}])  # fmt: skip
    assert (again.ar_steps, again.parallel_steps) == (2, 2)  # an old record without the keys counts neither


def test_decoders_record_their_gate_fallback_and_empty_drafts_as_ar_steps() -> None:
    tiny = make_tiny()
    config = GenerationConfig(max_new_tokens=24, eos_token_ids=())
    prompt = [5, 6, 7, 8, 9, 10, 11, 12]
    ar = build_decoder("ar", tiny, None, {}).generate(prompt, config).stats
    assert ar.ar_steps == ar.target_forwards - 1 and ar.parallel_steps == 0
    jac = build_decoder("jacobi", tiny, None, {"gate": "off", "block_size": 4}).generate(prompt, config).stats
    assert jac.parallel_steps > 0 and sum(jac.width_hist) == jac.target_forwards - 1
    # pld on a random model: mostly nothing found to propose -> AR steps, each one counted
    pld = build_decoder("pld", tiny, None, {"gamma_auto": False}).generate(prompt, config).stats
    assert pld.ar_steps + pld.parallel_steps == pld.target_forwards - 1
    assert pld.drafted_tokens == pld.extras["spec_proposed"]
    look = build_decoder("lookahead", tiny, None, {"gate": "off"}).generate(prompt, config).stats
    assert look.ar_steps == 0 and look.parallel_steps == look.target_forwards - 1


def test_speedup_interval_brackets_the_speedup_and_narrows_to_a_point_when_every_turn_agrees():
    from fastforward.core.metrics import speedup_interval

    base = [(100, 1.0), (50, 0.6), (128, 1.5), (80, 0.9)]
    twice = [(t, s / 2) for t, s in base]
    assert speedup_interval(twice, base) == pytest.approx((2.0, 2.0))
    noisy = [(100, 0.5), (50, 0.5), (128, 0.6), (80, 0.9)]
    lo, hi = speedup_interval(noisy, base)
    point = (sum(t for t, _ in noisy) / sum(s for _, s in noisy)) / (
        sum(t for t, _ in base) / sum(s for _, s in base)
    )
    assert lo < point < hi and lo < hi
    lo50, hi50 = speedup_interval(noisy, base, level=0.5)
    assert lo <= lo50 < hi50 <= hi and (lo50, hi50) != (lo, hi)  # a lower level, a narrower interval
    assert speedup_interval(noisy, base) == (lo, hi)  # seeded: the same records, the same interval
    assert speedup_interval(noisy[:1], base[:1]) is None
    assert speedup_interval(noisy[:3], base) is None

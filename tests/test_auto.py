"""Method ``auto``: it times lossless candidates, runs the fastest, caches the choice, and stays exact."""

from __future__ import annotations

import pytest

from fastforward.decoders import auto as auto_mod
from fastforward.decoders.ar import ARDecoder
from fastforward.decoders.registry import build_decoder, check_run
from fastforward.errors import FastForwardError

from .conftest import greedy_config


def test_pick_takes_the_fastest_and_says_why():
    choice, why = auto_mod.pick({"ar": 10.0, "pld": 15.0, "jacobi": 9.0})
    assert choice == "pld"
    assert "1.50x AR" in why and "jacobi 9.0" in why


def test_pick_breaks_ties_toward_the_earlier_candidate():
    assert auto_mod.pick({"ar": 10.0, "pld": 10.0})[0] == "ar"


def test_candidates_always_include_ar_first_and_sd_only_with_a_draft():
    o = auto_mod.AutoOptions()
    assert auto_mod.candidate_names(o, has_draft=False)[0] == "ar"
    assert "sd" not in auto_mod.candidate_names(o, has_draft=False)
    assert "sd" in auto_mod.candidate_names(o, has_draft=True)
    assert auto_mod.candidate_names(auto_mod.AutoOptions(candidates="pld"), False) == ["ar", "pld"]
    with pytest.raises(FastForwardError, match="own candidate"):
        auto_mod.candidate_names(auto_mod.AutoOptions(candidates="auto"), False)


def test_auto_accepts_a_draft_but_does_not_need_one():
    check_run("auto", {}, draft=True)
    check_run("auto", {}, draft=False)


@pytest.fixture()
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("FASTFORWARD_CACHE", str(tmp_path))
    return tmp_path


def test_auto_is_exact_and_reuses_its_cached_choice(smollm2, real_prompts, cache_dir, monkeypatch):
    opts = {"candidates": "pld,lookahead", "tokens": 8}
    dec = build_decoder("auto", smollm2, None, opts)
    assert dec.choice in ("ar", "pld", "lookahead")
    assert list((cache_dir / "auto").glob("*.json")), "the choice is cached"
    ar = ARDecoder(smollm2.model)
    cfg = greedy_config(40, tuple(smollm2.eos_token_ids))
    for ids in real_prompts[::6]:
        res = dec.generate(ids, cfg)
        assert res.tokens == ar.generate(ids, cfg).tokens
        assert res.stats.extras["auto_choice"] == dec.choice

    def no_timing(*_a, **_k):
        raise AssertionError("a cached choice must not be measured again")

    monkeypatch.setattr(auto_mod, "calibrate", no_timing)
    assert build_decoder("auto", smollm2, None, opts).choice == dec.choice
    with pytest.raises(AssertionError, match="measured again"):
        build_decoder("auto", smollm2, None, {**opts, "refresh": True})


def test_auto_skips_a_candidate_it_cannot_build(smollm2, cache_dir):
    # sd without a draft cannot be built: auto says so and times the rest
    dec = build_decoder("auto", smollm2, None, {"candidates": "sd", "tokens": 4})
    assert dec.choice == "ar"


def test_auto_refuses_a_lossy_candidate(smollm2, cache_dir):
    with pytest.raises(FastForwardError, match="lossy"):
        build_decoder("auto", smollm2, smollm2, {"candidates": "typical", "tokens": 4})

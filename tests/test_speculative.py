"""Speculative engine: exact greedy equality with AR in fp32 on real prompts (pld, layerskip, sd), stop
handling, seeded sampling, and clear errors for bad configurations."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fastforward.core.decoder import GenerationConfig, SamplingConfig
from fastforward.core.pacing import CostTracker, best_gamma, expected_tokens
from fastforward.decoders.ar import ARDecoder
from fastforward.decoders.ngram import find_ngram_continuation
from fastforward.decoders.registry import build_decoder
from fastforward.decoders.speculative import draft_models
from fastforward.decoders.speculative.drafters import PromptLookupDrafter
from fastforward.errors import FastForwardError
from fastforward.models.loading import LoadedModel, load_model

from .conftest import HALVES, greedy_ar, greedy_config, make_tiny, prepacked_refusal

N_TOKENS = 24


def _assert_identical(target: LoadedModel, decoder, prompts, min_prompts: int):
    """Every prompt's tokens equal greedy AR's (shared references, :func:`conftest.greedy_ar`); the draft
    counters summed."""
    eos = target.eos_token_ids
    cfg = greedy_config(N_TOKENS, eos)
    proposed = accepted = 0
    for ids in prompts:
        ref = greedy_ar(target.model, ids, N_TOKENS, eos)
        out = decoder.generate(ids, cfg)
        assert out.tokens == ref
        assert sum(out.stats.accepted_per_step) == len(ref) == out.stats.new_tokens
        proposed += out.stats.extras["spec_proposed"]
        accepted += out.stats.extras["spec_accepted"]
    assert len(prompts) >= min_prompts
    return proposed, accepted


@pytest.mark.parametrize("half", HALVES)
def test_pld_equals_greedy_ar_fp32_real_prompts(smollm2, real_prompts, half):
    """12 real prompts (the other 12 under the slow marker)."""
    dec = build_decoder("pld", smollm2, None, {"gamma": 5, "gamma_auto": False})
    proposed, accepted = _assert_identical(smollm2, dec, real_prompts[half::2], min_prompts=12)
    assert proposed > 0 and 0 < accepted < proposed  # both verdicts exercised


# slow: covered by default in tests/test_defaults_exact.py (gamma_auto, and random draft lengths 0 included)
@pytest.mark.slow
@pytest.mark.parametrize("half", HALVES)
def test_layerskip_equals_greedy_ar_fp32_real_prompts(smollm2, real_prompts, half):
    dec = build_decoder("layerskip", smollm2, None, {"layers": 26, "gamma": 3, "gamma_auto": False})
    # every fourth prompt (6, the three datasets; 6 more under the slow marker): a draft step here costs 26
    # of 30 layers, the slowest method of the suite on an AVX2-only CPU; test_defaults_exact adds the
    # default schedule
    proposed, accepted = _assert_identical(smollm2, dec, real_prompts[2 * half :: 4], min_prompts=6)
    assert 0 < accepted < proposed


def test_sd_equals_greedy_ar_fp32_with_a_bf16_copy_as_draft(smollm2, real_prompts):
    """The bf16 copy of SmolLM2 disagrees with fp32 now and then, so rejections and draft-cache rollback
    are exercised while the target's tokens must stay exactly AR's."""
    draft = load_model("smollm2-135m", "bfloat16")
    dec = build_decoder("sd", smollm2, draft, {"gamma": 4, "gamma_auto": False})
    proposed, accepted = _assert_identical(smollm2, dec, real_prompts[::3], min_prompts=8)
    assert accepted > 0.5 * proposed


def test_sd_lookup_first_equals_greedy_ar_fp32_real_prompts(smollm2, real_prompts):
    """The bf16 draft where lookup finds nothing, lookup chains elsewhere: AR's tokens on real prompts."""
    draft = load_model("smollm2-135m", "bfloat16")
    dec = build_decoder("sd", smollm2, draft, {"gamma": 4, "lookup_first": True, "gamma_auto": False})
    eos = smollm2.eos_token_ids
    cfg = greedy_config(N_TOKENS, eos)
    lookup = model = 0
    for ids in real_prompts[1::3]:
        out = dec.generate(ids, cfg)
        assert out.tokens == greedy_ar(smollm2.model, ids, N_TOKENS, eos)
        lookup += out.stats.extras["spec_lookup_steps"]
        model += out.stats.extras["spec_model_steps"]
    assert lookup > 0 and model > 0


@pytest.mark.parametrize("schedule", ["fixed", "adaptive", "gamma_auto"])
def test_sd_tiny_pair_equals_ar_with_rejections(schedule):
    """Two differently seeded random models: almost every draft is rejected, the output must not change."""
    target, draft = make_tiny(seed=0), make_tiny(seed=1)
    ar = ARDecoder(target.model)
    opts = {"gamma": 3, "gamma_max": 6, "gamma_auto": schedule == "gamma_auto"}
    if schedule == "adaptive":
        opts["adaptive"] = True
    dec = _build_untokenized("sd", target, draft, opts)
    for prompt in ([1, 2, 3], [7] * 5, list(range(10, 40))):
        cfg = greedy_config(20)
        assert dec.generate(prompt, cfg).tokens == ar.generate(prompt, cfg).tokens


def test_sd_self_draft_accepts_everything_and_counts_per_position():
    target = make_tiny(seed=0)
    # the model drafter's own counts: no lookup chain stands in for it
    dec = _build_untokenized("sd", target, target, {"gamma": 4, "gamma_auto": False, "lookup_first": False})
    out = dec.generate([1, 2, 3], greedy_config(21))
    ex = out.stats.extras
    assert ex["spec_accepted"] == ex["spec_proposed"] == 16  # 21 = 1 prefill token + 4 steps x (4 + bonus)
    assert ex["spec_accepted_per_position"] == ex["spec_proposed_per_position"] == [4, 4, 4, 4]
    assert out.stats.target_forwards == 5 and out.stats.accepted_per_step == [1, 5, 5, 5, 5]


@pytest.mark.parametrize("draft_bits", [8, 4])
def test_sd_with_a_quantized_draft_stays_exact_and_still_accepts(draft_bits):
    """draft_bits replaces the draft by its weight-only copy (the target's own weights here, so the
    float draft would accept everything): outputs stay AR's, the rounded draft still agrees often, and
    the draft the user loaded is not modified."""
    target = make_tiny(seed=0)
    draft = make_tiny(seed=0)
    before = {k: v.clone() for k, v in draft.model.state_dict().items()}
    opts = {"gamma": 4, "draft_bits": draft_bits, "group_size": 32, "gamma_auto": False}
    dec = _build_untokenized("sd", target, draft, opts)
    assert dec.drafter.model is not draft.model
    ar = ARDecoder(target.model)
    proposed = accepted = 0
    for prompt in ([1, 2, 3], [7] * 5, list(range(10, 40))):
        cfg = greedy_config(20)
        out = dec.generate(prompt, cfg)
        assert out.tokens == ar.generate(prompt, cfg).tokens
        proposed += out.stats.extras["spec_proposed"]
        accepted += out.stats.extras["spec_accepted"]
    assert accepted > 0.5 * proposed
    assert all(torch.equal(v, draft.model.state_dict()[k]) for k, v in before.items())


def test_lookup_first_takes_lookup_chains_where_text_repeats_and_stays_exact():
    """lookup_first: a recurring 2-gram drafts by lookup, other steps by the (here mostly wrong) draft model;
    outputs stay AR's and both kinds of step occur."""
    target, draft = make_tiny(seed=0), make_tiny(seed=1)
    ar = ARDecoder(target.model)
    dec = _build_untokenized("sd", target, draft, {"gamma": 3, "lookup_first": True, "gamma_auto": False})
    lookup = model = 0
    for prompt in ([1, 2, 3, 1, 2, 3, 1, 2], [7] * 5, list(range(10, 40)) * 2):
        cfg = greedy_config(24)
        out = dec.generate(prompt, cfg)
        assert out.tokens == ar.generate(prompt, cfg).tokens
        lookup += out.stats.extras["spec_lookup_steps"]
        model += out.stats.extras["spec_model_steps"]
    assert lookup > 0 and model > 0


def test_lookup_first_belongs_to_model_drafters_and_needs_two_token_ngrams():
    target = make_tiny(seed=0)
    with pytest.raises(FastForwardError, match="pld"):
        _build_untokenized("pld", target, None, {"lookup_first": True})
    with pytest.raises(FastForwardError, match="ngram_max >= 2"):
        _build_untokenized("sd", target, target, {"lookup_first": True, "ngram_max": 1})


def test_lookup_first_is_the_default_of_the_lossless_model_drafters_only():
    """On unless asked off, for sd, sd-sample, sd-cross, layerskip and qsd; off for the lossy typical and
    consultant (their output depends on what is drafted); off, without an error, when ngram_max=1 leaves no
    2-token n-gram to look up, since the user did not ask for it."""
    from fastforward.decoders.speculative import SpecOptions, lookup_first
    from fastforward.decoders.speculative.drafters import LookupFirstDrafter

    target = make_tiny(seed=0)
    for name in ("sd", "sd-sample", "layerskip", "qsd", "typical", "consultant"):
        draft = None if name in ("layerskip", "qsd") else target
        dec = _build_untokenized(name, target, draft, {})
        assert isinstance(dec.drafter, LookupFirstDrafter) == (name not in ("typical", "consultant")), name
        off = _build_untokenized(name, target, draft, {"lookup_first": False})
        assert not isinstance(off.drafter, LookupFirstDrafter), name
    assert not isinstance(
        _build_untokenized("qsd", target, None, {"ngram_max": 1}).drafter, LookupFirstDrafter
    )
    on = _build_untokenized("typical", target, target, {"lookup_first": True})
    assert isinstance(on.drafter, LookupFirstDrafter)
    assert lookup_first("sd-cross", SpecOptions())  # built only with two tokenizers; the rule is the same


def test_lookup_first_drafts_by_lookup_while_the_model_s_schedule_is_off():
    """Under gamma_auto the lookup and the model have a schedule each: a model draft that does not pay (its
    tracker says 0 tokens, here forced) leaves the free lookup chains running where the text repeats, where
    one schedule for both used to turn the lookup off with the model; the tokens stay AR's."""
    from fastforward.decoders.speculative.drafters import DraftContext, LookupFirstDrafter

    class Off(CostTracker):
        def choose(self, limit: int) -> int:
            return 0

    target, draft = make_tiny(seed=0), make_tiny(seed=1)
    dec = _build_untokenized("sd", target, draft, {})
    assert isinstance(dec.drafter, LookupFirstDrafter) and dec.spec.gamma_auto
    dec.costs = Off()
    prompt = [1, 2, 3, 4, 5, 6] * 4
    cfg = greedy_config(24)
    out = dec.generate(prompt, cfg)
    assert out.tokens == ARDecoder(target.model).generate(prompt, cfg).tokens
    assert out.stats.extras["spec_lookup_steps"] > 0 and out.stats.extras["spec_model_steps"] == 0
    # the split itself: the lookup's chain within its own budget, the model's within ctx.gamma, else none
    lf = dec.drafter
    ctx = DraftContext(prompt, 0, SamplingConfig(), None)
    chain, source = lf.propose_with(ctx, 3)
    assert source == "lookup" and chain.tokens == [1, 2, 3]
    assert lf.propose_with(DraftContext([9, 8, 7], 0, SamplingConfig(), None), 3) == (chain.__class__([]), "")
    assert lf.propose_with(DraftContext(prompt, 2, SamplingConfig(), None), 0)[1] == "model"


def test_each_source_of_a_lookup_first_row_learns_from_its_own_steps():
    """observe_sources: the drafting source learns acceptance and draft cost; the other only the verify cost
    at that width and a step of back-off; a step with no draft is an AR step to both."""
    from fastforward.core.pacing import StepCost
    from fastforward.decoders.speculative.engine import observe_sources

    model, lookup = CostTracker(5), CostTracker(5)
    observe_sources(model, lookup, "lookup", StepCost(4, 1, 0.01, 30.0))
    assert lookup.alpha != CostTracker.PRIOR and model.alpha == CostTracker.PRIOR
    assert model.verify_ms[5].value == 30.0 and model.draft_ms.value is None and model.wait == 1
    observe_sources(model, lookup, "model", StepCost(3, 3, 12.0, 25.0))
    assert model.alpha > CostTracker.PRIOR and lookup.verify_ms[4].value == 25.0
    observe_sources(model, lookup, "", StepCost(0, 0, 0.0, 20.0))
    assert model.off_steps == lookup.off_steps == 1 and model.verify_ms[1].value == lookup.verify_ms[1].value


def test_draft_bits_belongs_to_the_draft_model_methods():
    with pytest.raises(FastForwardError, match="pld") as err:
        build_decoder("pld", make_tiny(), None, {"draft_bits": 4})
    assert "\n" not in str(err.value)


def test_eos_and_max_new_tokens_stop_exactly_like_ar():
    target = make_tiny(seed=0)
    ar = ARDecoder(target.model)
    full = ar.generate([4, 5, 6], greedy_config(15)).tokens
    eos = (full[6],)
    cut = full[: full.index(eos[0]) + 1]
    for name, draft in (("sd", target), ("pld", None)):
        dec = _build_untokenized(name, target, draft, {"gamma": 5})
        assert dec.generate([4, 5, 6], greedy_config(15, eos)).tokens == cut
        for n in (1, 2, 7, 15):
            assert dec.generate([4, 5, 6], greedy_config(n)).tokens == full[:n]


def test_streaming_callback_sees_every_committed_token():
    target = make_tiny(seed=0)
    seen: list[int] = []
    out = _build_untokenized("sd", target, make_tiny(seed=2), {}).generate(
        [1, 2], greedy_config(17), on_tokens=seen.extend
    )
    assert seen == out.tokens


def test_sampling_is_reproducible_with_a_seed_and_sd_sample_refuses_greedy():
    target, draft = make_tiny(seed=0), make_tiny(seed=1)
    cfg = GenerationConfig(16, (), SamplingConfig(temperature=1.0, top_k=20, seed=5))
    for name in ("sd-sample", "consultant", "typical", "pld"):
        dec = _build_untokenized(name, target, draft if name != "pld" else None, {})
        assert dec.generate([3, 4], cfg).tokens == dec.generate([3, 4], cfg).tokens
    with pytest.raises(FastForwardError, match="temperature"):
        _build_untokenized("sd-sample", target, draft, {}).generate([3, 4], greedy_config(4))


@pytest.mark.parametrize("gamma", [0, -2])
def test_gamma_below_one_is_a_clear_error(gamma):
    target = make_tiny()
    with pytest.raises(FastForwardError, match="gamma"):
        _build_untokenized("pld", target, None, {"gamma": gamma})


def test_unknown_option_and_bad_layers_are_clear_errors():
    target = make_tiny()
    with pytest.raises(FastForwardError, match="unknown option"):
        _build_untokenized("pld", target, None, {"gamme": 3})
    with pytest.raises(FastForwardError, match="layers"):
        _build_untokenized("layerskip", target, None, {"layers": 2})


def test_tokenizer_mismatch_is_refused(smollm2):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(models.WordLevel({"[UNK]": 0, "def": 1, "f": 2, "x": 3}, unk_token="[UNK]"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    other = PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="[UNK]")
    tiny = make_tiny()
    draft = LoadedModel(
        name="tiny-other-tokenizer", path=Path("."), model=tiny.model, tokenizer=other, dtype="float32"
    )
    for name in ("sd", "consultant"):
        with pytest.raises(FastForwardError, match="different tokenizers"):
            build_decoder(name, smollm2, draft, {})


def test_ngram_lookup_prefers_longest_and_most_recent_match():
    toks = [1, 2, 3, 9, 1, 2, 3, 7, 8, 5, 2, 3]
    assert find_ngram_continuation(toks, 3, 3, 1) == [7, 8, 5]  # "2 3" -> most recent earlier "2 3 7 8 5"
    assert find_ngram_continuation([1, 2, 3, 4], 3, 3, 1) == []
    assert find_ngram_continuation([5, 6, 5], 4, 3, 1) == [6, 5]


def _build_untokenized(name: str, target: LoadedModel, draft: LoadedModel | None, options: dict):
    """Tiny models have no tokenizer (ids only); build() compares tokenizers only when both have one."""
    return build_decoder(name, target, draft, options)


def test_layerskip_view_shares_weights_and_equals_a_truncated_copy():
    import copy

    from fastforward.decoders.speculative.drafters import shallow_view

    target = make_tiny(seed=0)
    view = shallow_view(target.model, 1)
    assert view.lm_head.weight is target.model.lm_head.weight
    assert view.model.layers[0] is target.model.model.layers[0] and len(view.model.layers) == 1
    truncated = copy.deepcopy(target.model)
    truncated.model.layers = truncated.model.layers[:1]
    truncated.config.num_hidden_layers = 1
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.inference_mode():
        assert torch.allclose(view(input_ids=ids).logits, truncated(input_ids=ids).logits, atol=1e-6)
        assert not torch.allclose(view(input_ids=ids).logits, target.model(input_ids=ids).logits, atol=1e-3)


def test_draft_stop_shortens_chains_and_stays_exact():
    target, draft = make_tiny(seed=0), make_tiny(seed=1)
    cfg = greedy_config(20)
    ref = ARDecoder(target.model).generate([1, 2, 3], cfg).tokens
    fixed = {"gamma": 4, "gamma_auto": False, "lookup_first": False}  # the model's chains alone
    full = build_decoder("sd", target, draft, fixed).generate([1, 2, 3], cfg)
    short = build_decoder("sd", target, draft, {**fixed, "draft_stop": 0.999}).generate([1, 2, 3], cfg)
    assert full.tokens == short.tokens == ref
    assert short.stats.extras["spec_proposed"] <= short.stats.extras["spec_steps"]  # <= one token per chain
    assert full.stats.extras["spec_proposed"] > short.stats.extras["spec_proposed"]


def test_incremental_ngram_index_equals_the_full_scan():
    """The index prompt lookup keeps as the sequence grows answers exactly like scanning it every step."""
    import random

    from fastforward.decoders.ngram import NGramIndex

    rng = random.Random(0)
    for trial in range(40):
        lo, hi = rng.choice([(1, 1), (1, 3), (2, 4)])
        index = NGramIndex(hi, lo)
        seq = [rng.randrange(4 if trial % 2 else 12) for _ in range(rng.randrange(1, 20))]
        for _ in range(30):
            index.extend(seq)
            assert index.continuation(5) == find_ngram_continuation(seq, 5, hi, lo), (seq, lo, hi)
            seq = seq + [rng.randrange(4 if trial % 2 else 12) for _ in range(rng.randrange(1, 4))]
        index.extend([1, 2, 1])  # not an extension: the index starts over
        assert index.continuation(3) == find_ngram_continuation([1, 2, 1], 3, hi, lo)


def test_expected_tokens_and_best_gamma_follow_the_cost_model():
    assert expected_tokens(0.0, 5) == 1.0
    assert expected_tokens(1.0, 5) == 6.0
    assert expected_tokens(0.5, 2) == pytest.approx(1.75)
    flat = lambda k: 1.0  # noqa: E731 - a verify forward costing the same at any width (AVX-512 bf16)
    # a nearly free draft accepted 90% of the time: draft long
    assert best_gamma(0.9, 0.02, flat, 12) >= 8
    # a draft costing 0.7 of the target, accepted 50%: one token at most pays
    assert best_gamma(0.5, 0.7, flat, 12) == 1
    # ... and none does when a plain AR step (gamma 0) is allowed: 1.5 tokens for 1.7 forwards
    assert best_gamma(0.5, 0.7, flat, 12, gamma_min=0) == 0
    assert best_gamma(0.9, 0.02, flat, 12, gamma_min=0) >= 8
    # the same cheap draft when each extra verified token costs 30% more (AVX2 default GEMM): shorter
    steep = lambda k: 1.0 + 0.3 * (k - 1)  # noqa: E731
    assert best_gamma(0.9, 0.02, steep, 12) < best_gamma(0.9, 0.02, flat, 12)


def test_cost_tracker_learns_acceptance_and_costs_within_a_request():
    t = CostTracker().begin()
    assert t.choose(12) == 5  # nothing measured yet: keep the configured gamma
    for _ in range(10):
        t.record(proposed=4, accepted=0, draft_ms=40.0, verify_ms=10.0)  # 10 ms a draft token, all rejected
    assert t.alpha < 0.05 and t.draft_ms.value == pytest.approx(10.0)
    assert t.choose(12) == 0  # no draft length pays: a plain AR step
    t = CostTracker().begin()  # a cheap draft that is always right
    for _ in range(10):
        t.record(proposed=4, accepted=4, draft_ms=0.4, verify_ms=10.0)
    for _ in range(t.burst):  # AR's own cost is timed first (never inferred from the 5-token verify)
        assert t.choose(12) == 0
        t.record(proposed=0, accepted=0, draft_ms=0.0, verify_ms=9.0)
    assert t.choose(12) > 4
    assert t.verify_cost(9) == t.verify_ms[5].value  # nearest measured width


def test_a_draft_that_is_always_right_but_slow_is_judged_against_ar_s_measured_cost():
    """A draft that is always right never leaves room for an AR step, so AR's cost was the nearest measured
    verify's (1.5x a 1-token one in bf16 on AMX), and a qsd copy costing 18 ms a token kept drafting at 0.87x
    of AR. The tracker times AR itself once, then turns such a draft off."""
    t = CostTracker().begin()
    out = []
    for _ in range(40):
        g = t.choose(12)
        t.record(g, g, 18.0 * g, 16.0 if g == 0 else 24.8)  # every guess right
        out.append(g)
    assert t.verify_ms[1].count >= 2 and t.verify_cost(1) == pytest.approx(16.0)
    assert out[-20:] == [0] * 20  # ~6 tokens in 115 ms lose to 1 token in 16 ms


def test_a_stale_slow_ar_step_does_not_keep_a_losing_draft_on():
    """The 1-token width is measured only while the draft is off: one slow AR step (a busy moment) must
    not make a 2-token verify look cheaper than a 1-token one, and so a rarely right draft look paying."""
    t = CostTracker().begin()
    t.record(proposed=0, accepted=0, draft_ms=0.0, verify_ms=25.0)
    t.record(proposed=0, accepted=0, draft_ms=0.0, verify_ms=90.0)  # the last AR step before a probe: slow
    for _ in range(12):  # drafting: 14 ms a draft token, 25 ms a 2-token verify, 16% accepted
        t.record(proposed=1, accepted=int(_ % 6 == 0), draft_ms=14.0, verify_ms=25.0)
    assert t.verify_cost(1) <= t.verify_cost(2) == pytest.approx(25.0)
    assert t.choose(12) == 0  # 1.16 tokens in 39 ms lose to 1 token in 25 ms


def _lookup_steps(t: CostTracker, steps: int, keyed: bool) -> tuple[dict[int, list[int]], float]:
    """Prompt lookup's steps under gamma_auto: match lengths 1, 2, 3 in turn, each right at its own rate
    (accepted tokens = rate x gamma: 1-token matches never, 3-token ones 90%), free drafts, a verify costing
    10 ms for 1 token and 16 + k ms for k; the key given to the tracker or not. Returns the draft lengths
    chosen per match length and the tokens committed per ms."""
    rate = {1: 0.0, 2: 0.3, 3: 0.9}
    out: dict[int, list[int]] = {1: [], 2: [], 3: []}
    tokens = ms = 0.0
    for i in range(steps):
        n = 1 + i % 3
        g = t.choose(8, n if keyed else None)
        accepted, cost = int(rate[n] * g), 10.0 if g == 0 else 16.0 + g + 1
        t.record(g, accepted, 0.01 * g, cost, n if keyed else None)
        out[n].append(g)
        tokens, ms = tokens + accepted + 1, ms + cost
    return out, tokens / ms


def test_keyed_acceptance_drafts_the_trusted_matches_and_not_the_others():
    """SmolLM2's greedy outputs accept a 1-token prompt-lookup match's first token ~20% of the time and a
    3-token match's ~75% (results/pacing_s63/lookup_by_match.txt). Where a verify costs 1.7x+ a 1-token
    step, one pooled estimate drafts little or nothing; one per match length drafts the 3-token matches long
    and leaves the 1-token ones to AR steps, and commits more tokens per ms."""
    keyed, keyed_rate = _lookup_steps(CostTracker().begin(), 300, keyed=True)
    assert all(g >= 4 for g in keyed[3][-50:])
    assert sum(g > 0 for g in keyed[1][-50:]) <= 5  # only the probes
    _, pooled_rate = _lookup_steps(CostTracker().begin(), 300, keyed=False)
    assert keyed_rate > 1.2 * pooled_rate > 0
    t = CostTracker().begin()
    _lookup_steps(t, 60, keyed=True)
    assert t.acceptance(3) > 0.6 > 0.1 > t.acceptance(1) and t.acceptance(7) == t.alpha  # unseen: pooled


def test_prompt_lookup_key_is_the_matched_ngram_length():
    d = PromptLookupDrafter(ngram_max=3, ngram_min=1)
    assert d.key([5, 6, 7, 8]) == 0  # nothing repeats
    assert d.key([1, 2, 3, 9, 2, 3]) == 2  # "2 3" seen before
    assert d.key([1, 2, 3, 9, 1, 2, 3]) == 3
    assert d.index.continuation(2) == [9, 1]
    assert d.key([4, 1, 2, 7, 2]) == 1  # the index starts over on a sequence that does not extend the last


# AVX2-only CPU, SmolLM2 fp32 prepacked: a forward over k tokens costs 66 ms x this (tests/test_kernels_costs.py)
AVX2_REL = {1: 1.0, 4: 1.11, 8: 1.25, 16: 1.6}


def _verify_ms(k: int) -> float:
    pts = sorted(AVX2_REL.items())
    for (k0, r0), (k1, r1) in zip(pts, pts[1:], strict=False):
        if k0 <= k <= k1:
            return 66 * (r0 + (r1 - r0) * (k - k0) / (k1 - k0))
    return 66 * pts[-1][1]


def _simulate(t: CostTracker, steps: int, draft_ms, accept, start: int = 0) -> list[int]:
    """Run ``steps`` steps of gamma_auto against the recorded curve: ``draft_ms(i)`` per draft token,
    ``accept(i)`` the share of a draft accepted at step i. Returns each step's draft length."""
    out = []
    g = t.choose(12)
    for i in range(start, start + steps):
        if g > 0:
            t.record(g, int(accept(i) * g), g * draft_ms(i), _verify_ms(g + 1))
        else:
            t.record(0, 0, 0.0, _verify_ms(1))
        out.append(g)
        g = t.choose(12)
    return out


def test_a_draft_that_stops_paying_is_switched_off_and_probed_with_back_off():
    t = CostTracker().begin()
    paying = _simulate(t, 100, lambda i: 2.0, lambda i: 0.9)
    assert sum(g > 0 for g in paying[-50:]) == 50  # a cheap draft that is right: on
    losing = _simulate(t, 3000, lambda i: 2.0, lambda i: 0.0, start=100)
    drafted = sum(g > 0 for g in losing)
    assert losing[-1] == 0 and drafted < 0.03 * len(losing)  # off: speculation costs about its probes
    assert t.probes >= 4 and t.backoff == t.max_backoff  # probed again and again, each time later
    assert t.extras()["gamma_auto_probes"] == t.probes


def test_a_draft_that_starts_paying_again_comes_back():
    t = CostTracker().begin()
    _simulate(t, 300, lambda i: 2.0, lambda i: 0.0)  # never right: off
    assert t.choose(12) == 0
    back = _simulate(t, 600, lambda i: 2.0, lambda i: 1.0, start=300)  # repetitive text: every guess right
    assert all(g > 0 for g in back[-100:])  # found by a probe and kept on
    assert t.backoff == t.min_backoff


def test_a_cold_first_draft_sample_does_not_switch_the_draft_off():
    """The first drafted step of a request pays for the draft reading the prompt: 100x its later cost."""
    t = CostTracker().begin()
    out = _simulate(t, 20, lambda i: 200.0 if i == 0 else 2.0, lambda i: 0.9)
    assert (
        out[0] == 5 and out[1] > 0 and out[2 : 2 + t.burst] == [0] * t.burst
    )  # then AR's cost is timed once
    assert all(g > 0 for g in out[2 + t.burst :])
    t.begin()  # the next request: its cold sample is provisional again
    out = _simulate(t, 20, lambda i: 200.0 if i == 0 else 2.0, lambda i: 0.9)
    assert all(g > 0 for g in out)


def test_a_draft_as_slow_as_the_target_costs_only_its_probes():
    t = CostTracker().begin()
    out = _simulate(t, 3000, lambda i: 66.0, lambda i: 0.5)
    assert sum(g > 0 for g in out) < 0.03 * len(out) and t.probes >= 3


def test_a_draft_that_could_not_pay_even_if_always_right_waits_the_longest_back_off():
    """Probes measure acceptance. A draft costing what the target does cannot pay at any acceptance, so it
    is probed only after the longest back-off; a cheaper draft that is merely wrong is probed sooner."""

    def first_probe(draft_ms: float) -> int:
        t = CostTracker().begin()
        out = _simulate(t, 1500, lambda i: draft_ms, lambda i: 0.0)
        opening = next(i for i, g in enumerate(out) if g == 0)
        return next(i for i, g in enumerate(out) if i > opening and g > 0) - opening

    as_slow = first_probe(66.0)  # 66 ms a draft token, the target's 1-token forward
    assert as_slow >= CostTracker().max_backoff * CostTracker().burst
    assert first_probe(10.0) < as_slow / 4


def test_reopen_forgets_what_a_warm_up_measured():
    t = CostTracker().begin()
    _simulate(t, 50, lambda i: 66.0, lambda i: 0.0)
    assert t.choose(12) == 0
    t.reopen()
    assert t.choose(12) == 5 and t.probes == 0


def test_adaptive_and_gamma_auto_are_exclusive():
    target = make_tiny(seed=0)
    with pytest.raises(FastForwardError, match="adaptive or gamma_auto"):
        _build_untokenized("sd", target, target, {"adaptive": True, "gamma_auto": True})


# the bf16 draft (19 s on 2 cores) under the slow marker: the same reload and head path as fp32's
@pytest.mark.parametrize("draft_dtype", [pytest.param("bfloat16", marks=pytest.mark.slow), "float32"])
def test_sd_int4_draft_of_a_prepacked_draft_with_a_reduced_head_stays_exact(
    real_prompts, draft_dtype
) -> None:
    """A prepacked draft has released its float Linear weights: draft_bits quantizes a reload, and the
    restricted head (vocab) takes its rows from that reload too; the target's outputs stay AR's. The bf16
    draft needs oneDNN's bf16 kernels (skipped with the reason on AVX2-only CPUs); the fp32 one runs anywhere."""
    why = prepacked_refusal(getattr(torch, draft_dtype))
    if why:
        pytest.skip(why)
    target = load_model("smollm2-135m", "float32", path="prepacked")
    draft = load_model("smollm2-135m", draft_dtype, path="prepacked")
    dec = build_decoder(
        "sd", target, draft, {"gamma": 4, "draft_bits": 4, "vocab": 8192, "gamma_auto": False}
    )
    inner = dec.drafter.model  # the model drafter, behind the default lookup_first
    assert inner.head is not None and inner.model is not draft.model
    ar = ARDecoder(target.model)
    config = GenerationConfig(max_new_tokens=24, eos_token_ids=target.eos_token_ids)
    accepted = 0
    for ids in real_prompts[:4]:
        out = dec.generate(ids, config)
        assert out.tokens == ar.generate(ids, config).tokens
        accepted += out.stats.extras["spec_accepted"]
    assert accepted > 0


def test_lossy_verifiers_keep_a_fixed_gamma_by_default():
    """What typical and consultant accept depends on the draft length: a measured schedule would make their
    output follow the machine's timings."""
    target, draft = make_tiny(seed=0), make_tiny(seed=1)
    for name in ("typical", "consultant"):
        assert not _build_untokenized(name, target, draft, {}).spec.gamma_auto


@pytest.mark.parametrize("name", ["sd", "layerskip", "qsd", "pld"])
def test_gamma_auto_is_the_default_unless_a_schedule_is_named(name):
    target = make_tiny(seed=0)
    draft = target if name == "sd" else None
    assert _build_untokenized(name, target, draft, {}).spec.gamma_auto
    assert not _build_untokenized(name, target, draft, {"adaptive": True}).spec.gamma_auto
    assert not _build_untokenized(name, target, draft, {"gamma_auto": False}).spec.gamma_auto


def test_seeded_sampling_with_the_default_schedule_reproduces():
    """gamma_auto follows measured times, so with a seed the engine keeps the fixed gamma: the same seed
    gives the same tokens however long the steps took."""
    target, draft = make_tiny(seed=0), make_tiny(seed=1)
    dec = _build_untokenized("sd", target, draft, {"gamma": 3})
    cfg = GenerationConfig(max_new_tokens=30, sampling=SamplingConfig(temperature=0.9, seed=7))
    first = dec.generate([1, 2, 3], cfg)
    assert dec.generate([1, 2, 3], cfg).tokens == first.tokens
    ex = first.stats.extras
    assert len(ex["spec_proposed_per_position"]) <= 3  # never more than the fixed gamma ...
    assert 3 * ex["spec_steps"] - ex["spec_gamma_sum"] <= 1 + 2 + 3  # ... less only near max_new_tokens


def test_layerskip_never_feeds_its_draft_the_prompt() -> None:
    """Eager target: the layer-skip draft drafts on the target's own cache (its first layers already hold
    every committed token), so each draft forward feeds one token, the anchor or its own last guess; no
    prefill of the prompt, no catch-up after the target's steps. The target's cache is rolled back after
    each proposal: the tokens are AR's."""
    target = make_tiny("llama", vocab=96, seed=4)
    prompt = [5, 17, 33, 2, 90, 41, 7, 64, 12, 3, 28] * 3
    cfg = greedy_config(30)
    ref = ARDecoder(target.model).generate(prompt, cfg).tokens
    decoder = build_decoder("layerskip", target, None, {"gamma": 3, "gamma_auto": False, "layers": 1})
    fed: list[int] = []
    (view,) = draft_models(decoder.drafter)
    hook = view.register_forward_pre_hook(
        lambda _m, args, kw: fed.append(kw["input_ids"].shape[1]), with_kwargs=True
    )
    try:
        out = decoder.generate(prompt, cfg)
    finally:
        hook.remove()
    assert out.tokens == ref and out.stats.extras["spec_proposed"] > 0
    assert fed and set(fed) == {1}

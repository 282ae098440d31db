"""The acceptance rules' chain fast paths on hand-made logits, and the statistical check that rejection
sampling is lossless. The rules are those every method verifies through (:mod:`fastforward.core.acceptance`).

scipy is not installed: the chi-square statistic is computed here and compared with fixed critical values
(significance 0.001), with seeded generators so the tests are deterministic.
"""

from __future__ import annotations

import math

import pytest
import torch

from fastforward.core.acceptance import (
    EXACT,
    ConsultantRule,
    TypicalRule,
    Verdict,
    accept_chain_sampled,
    typical_threshold,
)
from fastforward.core.decoder import SamplingConfig
from fastforward.core.engine import chain_parents
from fastforward.core.sampling import processed_probs
from fastforward.data import load_dataset, render_prompt
from fastforward.decoders.speculative.engine import next_gamma

GREEDY = SamplingConfig()
CHI2_CRIT_001 = {1: 10.83, 2: 13.82, 3: 16.27, 4: 18.47, 5: 20.52, 6: 22.46, 7: 24.32, 8: 26.12, 9: 27.88}


ANCHOR = 7  # the row's last committed token: node 0 of every chain, never judged


def on_chain(rule, draft: list[int], logits, cfg=GREEDY, gen=None) -> Verdict:
    """Verify ``draft`` as the chain [anchor, *draft] through ``rule``, as every method does."""
    return rule.verify([ANCHOR, *draft], chain_parents(len(draft) + 1), logits, cfg, gen)


def logits_of(*rows: list[float]) -> torch.Tensor:
    """Logits whose softmax is exactly the given probability rows."""
    return torch.tensor(rows, dtype=torch.float32).log()


def chi_square(counts: torch.Tensor, probs: torch.Tensor) -> tuple[float, int]:
    """Pearson statistic, merging cells with expected count < 5 into one; returns (statistic, dof)."""
    n = counts.sum()
    expected = probs * n
    big = expected >= 5
    obs = torch.cat([counts[big].float(), counts[~big].sum().float().reshape(1)])
    exp = torch.cat([expected[big], expected[~big].sum().reshape(1)])
    keep = exp > 0
    obs, exp = obs[keep], exp[keep]
    return float(((obs - exp) ** 2 / exp).sum()), int(keep.sum()) - 1


# ----------------------------------------------------------------------------- greedy


def test_greedy_accepts_matching_prefix_then_recovers():
    logits = logits_of([0.1, 0.7, 0.2], [0.6, 0.3, 0.1], [0.2, 0.2, 0.6])
    v = on_chain(EXACT, [1, 2], logits)
    assert (v.accepted, v.token, v.path) == (1, 0, [0, 1])
    assert v.tokens([ANCHOR, 1, 2]) == [1, 0]


def test_greedy_full_acceptance_gives_bonus_and_empty_draft_is_ar():
    logits = logits_of([0.1, 0.7, 0.2], [0.6, 0.3, 0.1], [0.2, 0.2, 0.6])
    v = on_chain(EXACT, [1, 0], logits)
    assert (v.accepted, v.token) == (2, 2)
    assert on_chain(EXACT, [], logits[:1]).tokens([ANCHOR]) == [1]


# ----------------------------------------------------------------------------- rejection sampling


P0 = torch.tensor([0.40, 0.25, 0.15, 0.10, 0.06, 0.04])
P1 = torch.tensor([0.05, 0.05, 0.10, 0.20, 0.25, 0.35])
P2 = torch.tensor([0.30, 0.30, 0.10, 0.10, 0.10, 0.10])
Q0 = torch.tensor([0.05, 0.10, 0.50, 0.05, 0.20, 0.10])
Q1 = torch.tensor([0.30, 0.20, 0.10, 0.20, 0.10, 0.10])


def _run_toy(trials: int, seed: int, deterministic_draft: bool = False):
    gen = torch.Generator().manual_seed(seed)
    target = torch.stack([P0, P1, P2])
    first, second, bonus = torch.zeros(6), torch.zeros(6), torch.zeros(6)
    for _ in range(trials):
        if deterministic_draft:
            draft, q = [2, 4], None
        else:
            draft = [
                int(torch.multinomial(Q0, 1, generator=gen)),
                int(torch.multinomial(Q1, 1, generator=gen)),
            ]
            q = torch.stack([Q0, Q1])
        n, token = accept_chain_sampled(draft, q, target, gen)
        out = [*draft[:n], token]
        first[out[0]] += 1
        if len(out) > 1:
            second[out[1]] += 1
        if len(out) == 3:
            bonus[out[2]] += 1
    return first, second, bonus


@pytest.mark.parametrize("deterministic_draft", [False, True])
def test_rejection_sampling_reproduces_target_distribution_toy(deterministic_draft):
    first, second, bonus = _run_toy(12000, seed=1, deterministic_draft=deterministic_draft)
    for counts, p in ((first, P0), (second, P1), (bonus, P2)):
        stat, dof = chi_square(counts, p)
        assert stat < CHI2_CRIT_001[dof], (stat, dof, counts)


def test_chi_square_check_has_power_against_the_draft_distribution():
    first, _, _ = _run_toy(12000, seed=2)
    stat, dof = chi_square(first, Q0)  # the output follows P0, so Q0 must be rejected
    assert stat > 10 * CHI2_CRIT_001[dof]


def test_rejection_sampling_identical_distributions_always_accept():
    gen = torch.Generator().manual_seed(0)
    q = torch.stack([P0, P1])
    for _ in range(200):
        draft = [int(torch.multinomial(P0, 1, generator=gen)), int(torch.multinomial(P1, 1, generator=gen))]
        assert accept_chain_sampled(draft, q, torch.stack([P0, P1, P2]), gen)[0] == 2


def test_rejection_sampling_real_model_next_token_distribution(smollm2):
    """Target = SmolLM2's next-token distribution (T=1, top-k 8) after a real prompt; draft = its
    distribution after a different prompt. The committed first token must follow the target."""
    tok = smollm2.tokenizer
    samples = load_dataset("gsm8k", 2)
    ids = [render_prompt(tok, [{"role": "user", "content": s.turns[0]}]) for s in samples]
    with torch.inference_mode():
        lt = smollm2.model(input_ids=torch.tensor([ids[0]])).logits[0, -1]
        ld = smollm2.model(input_ids=torch.tensor([ids[1][:-3]])).logits[0, -1]
    cfg = SamplingConfig(temperature=1.0, top_k=8)
    p, q = processed_probs(lt, cfg), processed_probs(ld, cfg)
    assert (p - q).abs().sum() > 0.2  # a real mismatch, so rejections happen
    gen = torch.Generator().manual_seed(3)
    counts = torch.zeros_like(p)
    target = torch.stack([p, p])
    for _ in range(6000):
        x = int(torch.multinomial(q, 1, generator=gen))
        n, token = accept_chain_sampled([x], q[None], target, gen)
        counts[x if n else token] += 1
    stat, dof = chi_square(counts, p)
    assert stat < CHI2_CRIT_001[dof], (stat, dof)


# ----------------------------------------------------------------------------- typical acceptance


def test_typical_threshold_is_min_of_eps_and_entropy_term():
    uniform = torch.full((4,), 0.25)
    assert typical_threshold(uniform, 0.09, 0.3).item() == pytest.approx(0.3 * 0.25)
    peaked = torch.tensor([0.97, 0.01, 0.01, 0.01])
    assert typical_threshold(peaked, 0.09, 0.3).item() == pytest.approx(0.09)


def test_typical_accepts_plausible_tokens_and_rejects_improbable_ones():
    logits = logits_of([0.25, 0.25, 0.25, 0.25], [0.97, 0.01, 0.01, 0.01], [0.1, 0.6, 0.2, 0.1])
    v = on_chain(TypicalRule(), [3, 1], logits)  # 0.25 > 0.075: accept; 0.01 < 0.09: reject
    assert (v.accepted, v.token) == (1, 0)
    v = on_chain(TypicalRule(), [3, 0], logits)
    assert (v.accepted, v.token) == (2, 1)


# ----------------------------------------------------------------------------- consultant


def test_consultant_ema_rule_on_hand_made_logits():
    logits = logits_of([0.9, 0.05, 0.05], [0.05, 0.05, 0.9], [0.2, 0.7, 0.1])
    rule = ConsultantRule(eps=2.0, beta=0.2).start()
    v = on_chain(rule, [0, 1], logits)
    r1 = 0.8 * -math.log(0.9)  # 0.084 <= 2: accept
    r2 = 0.2 * r1 + 0.8 * -math.log(0.05)  # 2.41 > 2: reject, take the target's argmax (2)
    assert r2 > 2.0
    assert (v.accepted, v.token) == (1, 2)
    assert rule.ema == pytest.approx(0.2 * r1 + 0.8 * -math.log(0.9))  # the EMA carries the committed token
    assert rule.start().ema == 0.0  # a new generation (or batch row) starts afresh


def consultant(r_prev: float) -> ConsultantRule:
    """A Consultant rule (eps 2, beta 0.2) whose EMA after the last committed token is ``r_prev``."""
    rule = ConsultantRule(eps=2.0, beta=0.2).start()
    rule.ema = r_prev
    return rule


def test_consultant_smoothing_lets_one_unlikely_token_through_and_history_counts():
    # nll = -log(0.09) = 2.41 > eps: a plain NLL threshold rejects, the EMA from r=0 gives 1.93 <= 2.
    logits = logits_of([0.09, 0.91], [0.5, 0.5])
    assert on_chain(consultant(0.0), [0], logits).accepted == 1
    # A bad history (r_prev = 3) rejects even a likely token: 0.2 * 3 + 0.8 * 0.094 = 0.675 accepts...
    assert on_chain(consultant(3.0), [1], logits).accepted == 1
    # ...but r_prev = 10 gives 2.08 > 2 and rejects it.
    v = on_chain(consultant(10.0), [1], logits)
    assert (v.accepted, v.token) == (0, 1)


def test_consultant_all_accepted_gives_bonus_and_sampling_draws_from_target():
    logits = logits_of([0.9, 0.1], [0.8, 0.2], [0.0001, 0.9999])
    v = on_chain(consultant(0.0), [0, 0], logits)
    assert (v.accepted, v.token) == (2, 1)
    gen = torch.Generator().manual_seed(0)
    toks = {
        on_chain(consultant(50.0), [1, 1], logits, SamplingConfig(temperature=1.0), gen).token
        for _ in range(50)
    }
    assert toks == {0, 1}  # rejected at position 0, replacement sampled from p_0 = [0.9, 0.1]


# ----------------------------------------------------------------------------- adaptive gamma


def test_next_gamma_grows_on_full_acceptance_shrinks_on_rejection_and_is_bounded():
    assert next_gamma(4, 4, 4, 1, 8) == 5
    assert next_gamma(4, 4, 2, 1, 8) == 3
    assert next_gamma(8, 8, 8, 1, 8) == 8
    assert next_gamma(1, 1, 0, 1, 8) == 1
    assert next_gamma(3, 0, 0, 1, 8) == 3  # nothing proposed: unchanged

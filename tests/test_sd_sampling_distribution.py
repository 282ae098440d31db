"""``sd-sample`` is lossless in distribution: end to end, its tokens follow the TARGET model's distribution.

Speculative sampling (Leviathan et al. 2023, Chen et al. 2023) promises that accepting draft token x with
probability min(1, p(x) / q(x)) and resampling a rejection from normalise(max(0, p - q)) yields exactly the
target's distribution p, whatever the draft q. Token-level unit tests of the verifier cannot see bugs in the
loop around it (draft probabilities misaligned with draft tokens, a stale draft cache after a rollback, a
bonus token drawn at the wrong position, temperature / top-k applied to only one side), so this module
checks the promise through the public API only: ``build_decoder("sd-sample", ...)`` and ``generate``.

Set-up: tiny random-init target and draft (different seeds) with a 12-token vocabulary, their LM heads scaled
so that the distributions are far from uniform and the draft disagrees often (the acceptance rate is
asserted to lie in (0.2, 0.9), so the test cannot pass with all-accept or all-reject). For one prompt the
target's exact joint distribution over the first 4 new tokens is enumerated with full fp32 forwards
(p(x1) p(x2|x1) p(x3|x1,x2) p(x4|x1..x3)) after the same temperature / top-k processing the decoders use
(:func:`fastforward.core.sampling.processed_probs`). ``sd-sample`` with gamma 3 then generates 4 tokens
for each of seeds 0..N-1 (deterministic: the test is not flaky), and chi-square goodness-of-fit tests
(cells with expected count < 5 pooled) compare the sampled joints of (x1, x2), (x2, x3) and (x3, x4) with
the exact ones. The first new token always comes from the target's prefill, so x2 is the first speculated
token: (x2, x3) covers both draft positions, the residual draws, and the draft-cache rollback after a
rejection; (x3, x4) covers the bonus token drawn after full acceptance.

Controls: the same statistic REJECTS (p < 1e-3) samples of the draft's own distribution (plain AR sampling
from the draft), so the test has the power to see a wrong distribution; the batched reference is checked
against the chain rule one prefix at a time, and the p-value function against known values. (Measured power
on this set-up, by patching the verifier outside the test suite: resampling a rejection from p instead of
the residual, drawing the bonus token at the wrong position, or pairing draft tokens with the wrong draft
distributions all give p < 1e-4.)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch

from fastforward.core.decoder import Decoder, GenerationConfig, SamplingConfig
from fastforward.core.sampling import processed_probs
from fastforward.core.vocab import RestrictedHead, VocabSubset
from fastforward.decoders.registry import build_decoder
from fastforward.eval import distribution
from fastforward.models.loading import LoadedModel

VOCAB = 12
LOGIT_SCALE = 3.0  # random init gives near-uniform softmaxes; sharpen both models' LM heads
PROMPT = [1, 5, 3, 7]
NEW_TOKENS = 4  # x1 from the prefill; then 2 draft tokens (gamma 3 capped by the room left) + bonus
N_SAMPLES = 2000
N_CONTROL = 500
ALPHA = 1e-3
# (temperature, top_k); top-k under the slow marker (27 s on 2 cores; the verifier's filters are also tested
# directly, and fast, in tests/test_tree_sampling.py)
CONFIGS = [(1.0, 0), pytest.param(0.7, 5, marks=pytest.mark.slow)]


@pytest.fixture(autouse=True, scope="module")
def _one_thread() -> Iterator[None]:
    """Tiny models run fastest single-threaded; restore the setting for the rest of the session."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _sharpened(seed: int) -> LoadedModel:
    return distribution.tiny_target(VOCAB, seed, LOGIT_SCALE)


@pytest.fixture(scope="module")
def target() -> LoadedModel:
    return _sharpened(seed=0)


@pytest.fixture(scope="module")
def draft() -> LoadedModel:
    return _sharpened(seed=1)


def sampling(temperature: float, top_k: int, seed: int) -> SamplingConfig:
    return SamplingConfig(temperature=temperature, top_k=top_k, top_p=1.0, seed=seed)


def exact_joint(model: LoadedModel, cfg: SamplingConfig, prompt: list[int] = PROMPT) -> torch.Tensor:
    """The model's exact distribution over the first NEW_TOKENS new tokens after ``prompt``: [V] * NEW_TOKENS."""
    joint = distribution.exact_joint(model.model, cfg, prompt, NEW_TOKENS)
    assert torch.allclose(joint.sum(), torch.tensor(1.0, dtype=torch.float64), atol=1e-9)
    return joint


chi_square_pvalue = distribution.chi_square_pvalue
pair_marginal = distribution.pair_marginal


def counts(samples: list[list[int]], a: int, b: int) -> torch.Tensor:
    """The [V, V] table of how often (token a, token b) occurred."""
    table = torch.zeros(VOCAB, VOCAB, dtype=torch.float64)
    for s in samples:
        table[s[a], s[b]] += 1
    return table


def assert_follows(samples: list[list[int]], joint: torch.Tensor, label: str) -> None:
    """Every sample lies in the support of ``joint``, and the (x1,x2), (x2,x3), (x3,x4) joints fit it."""
    outside = [s for s in samples if joint[tuple(s)] == 0]
    assert not outside, (
        f"{label}: {len(outside)} samples have probability 0 under the target, e.g. {outside[:5]}"
    )
    report = []
    for a in range(NEW_TOKENS - 1):
        stat, df, pvalue = chi_square_pvalue(counts(samples, a, a + 1), pair_marginal(joint, a, a + 1))
        assert df >= 5, f"{label}: too few cells for a meaningful test of tokens ({a + 1}, {a + 2}): df={df}"
        report.append((a, stat, df, pvalue))
    failed = [r for r in report if r[3] <= ALPHA]
    assert not failed, f"{label}: sampled joints differ from the target's:\n" + "\n".join(
        f"  tokens ({a + 1}, {a + 2}): chi2={stat:.1f}, df={df}, p={pvalue:.2e}"
        for a, stat, df, pvalue in failed
    )


def generate_all(
    decoder: Decoder,
    temperature: float,
    top_k: int,
    n: int,
    new_tokens: int = NEW_TOKENS,
    prompt: list[int] = PROMPT,
    top_p: float = 1.0,
) -> tuple[list[list[int]], list[dict[str, Any]]]:
    """Generate ``new_tokens`` tokens after ``prompt`` once per seed 0..n-1: the samples and each run's
    extras (plus ``committed_per_step``, the stats' tokens per forward of that run)."""
    samples: list[list[int]] = []
    extras: list[dict[str, Any]] = []
    for seed in range(n):
        cfg = SamplingConfig(temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)
        result = decoder.generate(
            prompt, GenerationConfig(max_new_tokens=new_tokens, eos_token_ids=(), sampling=cfg)
        )
        assert len(result.tokens) == new_tokens
        samples.append(result.tokens)
        extras.append({**result.stats.extras, "committed_per_step": list(result.stats.accepted_per_step)})
    return samples, extras


@pytest.mark.parametrize(("temperature", "top_k"), CONFIGS)
def test_sd_sample_reproduces_the_target_distribution(
    target: LoadedModel, draft: LoadedModel, temperature: float, top_k: int
) -> None:
    joint = exact_joint(target, sampling(temperature, top_k, 0))
    decoder = build_decoder("sd-sample", target, draft, {"gamma": 3, "gamma_auto": False})
    samples, extras = generate_all(decoder, temperature, top_k, N_SAMPLES)

    proposed = sum(e["spec_proposed"] for e in extras)
    accepted = sum(e["spec_accepted"] for e in extras)
    assert proposed >= N_SAMPLES, f"the draft proposed only {proposed} tokens in {N_SAMPLES} generations"
    rate = accepted / proposed
    assert 0.2 < rate < 0.9, f"acceptance rate {rate:.3f}: the test needs both acceptances and rejections"

    assert_follows(samples, joint, f"sd-sample T={temperature} top_k={top_k} (acceptance {rate:.2f})")


@pytest.mark.parametrize(("temperature", "top_k"), CONFIGS)
def test_negative_control_draft_samples_are_rejected(
    target: LoadedModel, draft: LoadedModel, temperature: float, top_k: int
) -> None:
    """The same statistic on the DRAFT's own samples must reject them: the test can see a wrong distribution."""
    joint = exact_joint(target, sampling(temperature, top_k, 0))
    on_draft, _ = generate_all(build_decoder("ar", draft, None, {}), temperature, top_k, N_CONTROL, 2)
    _, df, pvalue = chi_square_pvalue(counts(on_draft, 0, 1), pair_marginal(joint, 0, 1))
    assert df >= 5, f"too few cells for a meaningful test: df={df}"
    assert pvalue < ALPHA, f"the draft's own samples fit the target's distribution (p={pvalue:.2e}): no power"


@pytest.mark.parametrize(("temperature", "top_k"), CONFIGS)
def test_reference_joint_is_the_chain_rule(target: LoadedModel, temperature: float, top_k: int) -> None:
    """The batched enumeration equals p(x1) p(x2|x1) ... computed one prefix at a time."""
    cfg = sampling(temperature, top_k, 0)
    joint = exact_joint(target, cfg)
    flat = joint.flatten()
    picks = torch.multinomial(flat, 6, generator=torch.Generator().manual_seed(0)).tolist()
    picks += [int(flat.argmax()), int(flat.argmin())]
    for index in picks:
        tokens = [int(t) for t in torch.unravel_index(torch.tensor(index), joint.shape)]
        prob, seq = 1.0, list(PROMPT)
        for tok in tokens:
            with torch.inference_mode():
                logits = target.model(input_ids=torch.tensor([seq])).logits[0, -1]
            prob *= float(processed_probs(logits, cfg)[tok])
            seq.append(tok)
        assert float(flat[index]) == pytest.approx(prob, rel=1e-4, abs=1e-9), f"tokens {tokens}"


def test_chi_square_pvalue_known_values() -> None:
    stat, df, pvalue = chi_square_pvalue(torch.tensor([60.0, 40.0]), torch.tensor([0.5, 0.5]))
    assert (stat, df) == (pytest.approx(4.0), 1)
    assert pvalue == pytest.approx(0.0455003, rel=1e-5)  # chi2.sf(4, 1)
    # expected [50, 49, 0.5, 0.5]: the two small cells are pooled, the pool (1.0 < 5) joins the 49 cell.
    stat, df, pvalue = chi_square_pvalue(
        torch.tensor([50.0, 48.0, 1.0, 1.0]), torch.tensor([0.5, 0.49, 0.005, 0.005])
    )
    assert (stat, df, pvalue) == (pytest.approx(0.0), 1, pytest.approx(1.0))
    _, df, pvalue = chi_square_pvalue(torch.full((10,), 100.0) + torch.arange(10.0), torch.full((10,), 0.1))
    assert df == 9 and 0.99 < pvalue <= 1.0


def test_sd_sample_with_a_reduced_draft_vocabulary_reproduces_the_target_distribution(
    target: LoadedModel, draft: LoadedModel
) -> None:
    """A draft restricted to 8 of the 12 ids (``vocab=K``) reports zero probability outside its subset, so
    the residual keeps all of the target's mass there: the output still follows the target exactly."""
    temperature, top_k = CONFIGS[0]
    joint = exact_joint(target, sampling(temperature, top_k, 0))
    # the model's drafts alone (no lookup chains), so every draft goes through the restricted head
    decoder = build_decoder(
        "sd-sample", target, draft, {"gamma": 3, "gamma_auto": False, "lookup_first": False}
    )
    keep = [0, 2, 3, 5, 6, 8, 9, 11]  # not a prefix: a position/id mix-up would show
    subset = VocabSubset(torch.tensor(keep), VOCAB)
    decoder.drafter.head = RestrictedHead(draft.model.lm_head.weight, None, subset)
    samples, extras = generate_all(decoder, temperature, top_k, N_SAMPLES)
    rate = sum(e["spec_accepted"] for e in extras) / sum(e["spec_proposed"] for e in extras)
    assert 0.1 < rate < 0.9, f"acceptance rate {rate:.3f}: the test needs both acceptances and rejections"
    # the target itself puts mass outside the draft's subset, and the output must carry it
    outside = sum(1 for s in samples for t in s[1:] if t not in keep) / (len(samples) * (NEW_TOKENS - 1))
    assert outside > 0.05, f"only {outside:.3f} of the speculated positions hold ids outside the subset"
    assert_follows(samples, joint, f"sd-sample vocab=8/{VOCAB} (acceptance {rate:.2f})")

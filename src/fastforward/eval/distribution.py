"""Is a sampling decoder lossless in distribution? An end-to-end check against exact enumeration.

Speculative and parallel methods promise that, under temperature / top-k / top-p sampling, their tokens
follow the target's own sampling distribution. Unit tests of a verifier cannot see bugs in the loop around
it (a draft probability paired with the wrong token, a stale cache after a rollback, a bonus token drawn at
the wrong position), so the check runs ``generate`` itself: a tiny random-init target with a small
vocabulary (its LM head scaled so the distributions are far from uniform), the exact joint distribution of
the first few new tokens enumerated with full fp32 forwards, one seeded generation per sample (so the check
is deterministic), and Pearson chi-square goodness of fit on consecutive pairs (x1, x2), (x2, x3), ... with
cells of expected count < 5 pooled. The tests assert on it (tests/test_sampling_methods.py,
tests/test_sd_sampling_distribution.py) and ``scripts/sampling_results.py`` records its p-values in
results/sampling.json. scipy is not a dependency: the p-value is torch's regularized upper gamma function.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from fastforward.core.decoder import Decoder, GenerationConfig, SamplingConfig
from fastforward.core.sampling import processed_probs
from fastforward.models.loading import LoadedModel

MIN_EXPECTED = 5.0  # cells with a smaller expected count are pooled


def tiny_model(arch: str = "llama", vocab: int = 512, seed: int = 0) -> LoadedModel:
    """A random-init 2-layer model of the given architecture (``llama`` or ``qwen2``); tokenizer-free (ids
    only). The one builder of tiny models: the test suite's fast edge tests use it too."""
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

    torch.manual_seed(seed)
    common = dict(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        eos_token_id=vocab - 1,
        bos_token_id=0,
        tie_word_embeddings=False,
    )
    cfg = {"llama": LlamaConfig, "qwen2": Qwen2Config}[arch](**common)
    model = AutoModelForCausalLM.from_config(cfg).eval()
    model.requires_grad_(False)
    return LoadedModel(name=f"tiny-{arch}", path=Path("."), model=model, tokenizer=None, dtype="float32")


def tiny_target(vocab: int = 12, seed: int = 0, logit_scale: float = 3.0) -> LoadedModel:
    """:func:`tiny_model` with ``vocab`` ids and its LM head scaled by ``logit_scale`` (random init gives
    near-uniform softmaxes; a sharper target makes guesses both hit and miss)."""
    loaded = tiny_model(vocab=vocab, seed=seed)
    with torch.no_grad():
        loaded.model.lm_head.weight.mul_(logit_scale)
    return loaded


def exact_joint(
    model: torch.nn.Module,
    cfg: SamplingConfig,
    prompt: Sequence[int],
    new_tokens: int,
    allowed: Sequence[torch.Tensor] | None = None,
) -> torch.Tensor:
    """The model's exact distribution over the first ``new_tokens`` tokens after ``prompt``: [V] * new_tokens.

    One fp32 forward over every continuation of length new_tokens - 1 (no cache), processed like the
    decoders process logits (:func:`processed_probs`); float64 products. ``allowed[i]`` ([V] bool): a
    constraint's mask at new position i (one that depends on the position only), applied to the logits
    before processing, as constrained decoding does."""
    vocab = int(model.config.vocab_size)
    conts = torch.tensor(list(itertools.product(range(vocab), repeat=new_tokens - 1)), dtype=torch.long)
    conts = conts.reshape(-1, new_tokens - 1)
    ids = torch.cat([torch.tensor(list(prompt)).expand(len(conts), -1), conts], dim=1)
    with torch.inference_mode():
        logits = model(input_ids=ids).logits[:, len(prompt) - 1 :].float()  # [V^(n-1), n, V]
    if allowed is not None:
        logits = logits.clone()  # an inference tensor: masked in a copy
        for i, ok in enumerate(allowed[:new_tokens]):
            logits[:, i, ~ok] = float("-inf")
    probs = processed_probs(logits, cfg).double()
    joint = torch.tensor(1.0, dtype=torch.float64)
    for i in range(new_tokens):
        # step i depends only on the first i continuation tokens (rows are in itertools.product order, the
        # last token fastest): one row per such prefix, every vocab ** (new_tokens - 1 - i)-th
        step = probs[:: vocab ** (new_tokens - 1 - i), i].reshape(*([vocab] * (i + 1)))
        joint = joint.unsqueeze(-1) * step
    return joint


def chi_square_pvalue(observed: torch.Tensor, probs: torch.Tensor) -> tuple[float, int, float]:
    """Pearson's goodness of fit of counts ``observed`` to cell probabilities ``probs`` (same shape).

    Cells with expected count < MIN_EXPECTED are pooled into one cell (merged into the smallest other cell
    if the pool is still below MIN_EXPECTED). Returns (statistic, degrees of freedom, p-value)."""
    obs = observed.flatten().double()
    expected = probs.flatten().double() * obs.sum()
    big = expected >= MIN_EXPECTED
    cells_obs, cells_exp = obs[big], expected[big]
    pool_obs, pool_exp = obs[~big].sum(), expected[~big].sum()
    if pool_exp >= MIN_EXPECTED:
        cells_obs = torch.cat([cells_obs, pool_obs[None]])
        cells_exp = torch.cat([cells_exp, pool_exp[None]])
    elif pool_exp > 0 or pool_obs > 0:
        smallest = int(cells_exp.argmin())
        cells_obs[smallest] += pool_obs
        cells_exp[smallest] += pool_exp
    stat = float(((cells_obs - cells_exp) ** 2 / cells_exp).sum())
    df = len(cells_exp) - 1
    pvalue = float(
        torch.special.gammaincc(
            torch.tensor(df / 2.0, dtype=torch.float64), torch.tensor(stat / 2.0, dtype=torch.float64)
        )
    )
    return stat, df, pvalue


def pair_counts(samples: Sequence[Sequence[int]], a: int, b: int, vocab: int) -> torch.Tensor:
    """The [V, V] table of how often (token a, token b) occurred."""
    table = torch.zeros(vocab, vocab, dtype=torch.float64)
    for s in samples:
        table[s[a], s[b]] += 1
    return table


def pair_marginal(joint: torch.Tensor, a: int, b: int) -> torch.Tensor:
    """The exact [V, V] marginal of new tokens (a, b) from the full joint."""
    return joint.sum(dim=[d for d in range(joint.dim()) if d not in (a, b)])


@dataclass
class PairTest:
    tokens: tuple[int, int]  # 1-based positions of the new tokens tested
    statistic: float
    df: int
    p_value: float


def pair_tests(samples: Sequence[Sequence[int]], joint: torch.Tensor) -> list[PairTest]:
    """Chi-square tests of the consecutive pairs (x1, x2), (x2, x3), ... against the exact joint."""
    vocab, out = joint.shape[0], []
    for a in range(joint.dim() - 1):
        stat, df, p = chi_square_pvalue(pair_counts(samples, a, a + 1, vocab), pair_marginal(joint, a, a + 1))
        out.append(PairTest((a + 1, a + 2), stat, df, p))
    return out


def sample_runs(
    decoder: Decoder, cfg: SamplingConfig, prompt: Sequence[int], n: int, new_tokens: int
) -> tuple[list[list[int]], list[dict[str, Any]]]:
    """``n`` generations of ``new_tokens`` tokens after ``prompt``, with seeds 0..n-1 (``cfg.seed`` is
    ignored): the samples and each run's extras plus ``committed_per_step`` (tokens per target forward)."""
    samples, extras = [], []
    for seed in range(n):
        config = GenerationConfig(
            max_new_tokens=new_tokens,
            eos_token_ids=(),
            sampling=SamplingConfig(cfg.temperature, cfg.top_k, cfg.top_p, seed),
        )
        result = decoder.generate(list(prompt), config)
        samples.append(result.tokens)
        extras.append({**result.stats.extras, "committed_per_step": list(result.stats.accepted_per_step)})
    return samples, extras

"""Token selection shared by every method: greedy, and temperature / top-k / top-p sampling with a seed.

Verifiers that sample (rejection sampling) must see the *same* processed distribution for draft and target,
so the processing lives in one function, :func:`processed_probs`.
"""

from __future__ import annotations

import torch

from fastforward.core.decoder import SamplingConfig


def make_generator(cfg: SamplingConfig, device: torch.device | str = "cpu") -> torch.Generator | None:
    if cfg.greedy:
        return None
    gen = torch.Generator(device=device)
    gen.manual_seed(cfg.seed if cfg.seed is not None else torch.seed())
    return gen


def processed_probs(logits: torch.Tensor, cfg: SamplingConfig) -> torch.Tensor:
    """Probabilities after temperature, top-k and top-p. logits: [..., V] -> probs [..., V] (float32)."""
    logits = logits.float()
    if cfg.greedy:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
    logits = logits / cfg.temperature
    if cfg.top_k > 0 and cfg.top_k < logits.shape[-1]:
        kth = torch.topk(logits, cfg.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if cfg.top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        cum = sorted_logits.softmax(-1).cumsum(-1)
        drop_sorted = cum - sorted_logits.softmax(-1) >= cfg.top_p  # keep the smallest prefix reaching top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits.softmax(-1)


def sample_from(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """Draw one token per row. probs: [..., V] -> [...] (long)."""
    flat = probs.reshape(-1, probs.shape[-1])
    out = torch.multinomial(flat, 1, generator=generator).squeeze(-1)
    return out.reshape(probs.shape[:-1])


def select_token(
    logits: torch.Tensor, cfg: SamplingConfig, generator: torch.Generator | None
) -> torch.Tensor:
    """Greedy argmax or a seeded draw. logits: [..., V] -> [...]."""
    if cfg.greedy:
        return logits.argmax(-1)
    return sample_from(processed_probs(logits, cfg), generator)

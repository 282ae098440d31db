"""KV-cache helpers over transformers' public Cache API: create, measure, roll back.

Rollback is a length operation (crop), never a copy. transformers 5 only accepts ``crop(-n)``, so we work
in absolute lengths here and translate. Per-row lengths for batch > 1 will live here too.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache


def new_cache(model: torch.nn.Module) -> DynamicCache:
    return DynamicCache(config=model.config)


def cache_length(cache: DynamicCache) -> int:
    return int(cache.get_seq_length())


def rollback(cache: DynamicCache, length: int) -> None:
    """Drop every cached position at or after ``length`` (keep the first ``length``)."""
    current = cache_length(cache)
    if length < 0 or length > current:
        raise ValueError(f"cannot roll back a cache of length {current} to {length}")
    if length < current:
        cache.crop(length - current)


def keep_positions(cache: DynamicCache, start: int, keep: list[int]) -> None:
    """After a tree/branch verification forward that appended k entries at ``start``, keep only the entries
    at offsets ``keep`` (relative to ``start``, in order), so the cache holds the accepted path contiguously.

    Uses each layer's public ``keys``/``values`` tensors ([B, heads, T, dim]); a chain prefix needs no copy.
    """
    if keep == list(range(len(keep))):
        rollback(cache, start + len(keep))
        return
    idx = torch.tensor([start + i for i in keep], dtype=torch.long)
    for layer in cache.layers:
        for attr in ("keys", "values"):
            t = getattr(layer, attr)
            tail = t.index_select(2, idx.to(t.device))
            setattr(layer, attr, torch.cat([t[:, :, :start], tail], dim=2))

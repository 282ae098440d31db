"""KV-cache surgery over transformers' public Cache API: create, measure, roll back, compact, batch rows.

Every method that verifies guesses must undo the keys and values of the rejected ones. Rollback is a length
operation (crop), never a copy; keeping an accepted tree path writes its entries over the slots right after
the prefix and then crops, so no layer is rebuilt.

Sliding-window models (Gemma 2/3, Mistral-style): transformers' sliding layers keep only the last
``window - 1`` positions, so once prompt + output outgrows the window a crop cannot restore what was
dropped (``DynamicCache.crop`` raises) and absolute-length tree masks no longer line up. :func:`new_cache`
therefore gives every layer a full-length cache, and the window is enforced by the attention masks instead
(:mod:`fastforward.core.masks`; the model's own masks do it when we pass none). Outputs are the same as with
the sliding cache; memory grows with the sequence as it already does for the full-attention layers. Caches
made elsewhere are refused in one line by every helper here (:func:`full_layers`).

transformers 5 only accepts ``crop(-n)``, so we work in absolute lengths here and translate.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import DynamicCache

from fastforward.errors import FastForwardError


def text_config(model: torch.nn.Module) -> object:
    """The decoder's config (multimodal configs nest it)."""
    cfg = model.config
    return cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg


def sliding_window(model: torch.nn.Module) -> int | None:
    """The attention window of the model's sliding layers, or None when every layer sees the whole sequence."""
    cfg = text_config(model)
    window = getattr(cfg, "sliding_window", None)
    if not window:
        return None
    types = getattr(cfg, "layer_types", None)
    if types is not None:
        return int(window) if "sliding_attention" in types else None
    return int(window) if getattr(cfg, "use_sliding_window", True) else None


def new_cache(model: torch.nn.Module) -> DynamicCache:
    """An empty cache; on sliding-window models every layer caches the whole sequence (see module doc)."""
    if sliding_window(model) is not None:
        return DynamicCache()  # no config: every layer is a full DynamicLayer, created on first use
    return DynamicCache(config=model.config)


def full_layers(cache: DynamicCache) -> list:
    """The cache's layers, refusing layers that drop old positions (a rollback could not restore them)."""
    for layer in cache.layers:
        if getattr(layer, "is_sliding", False):
            window = getattr(layer, "sliding_window", "?")
            raise FastForwardError(
                f"this cache has sliding-window layers (window {window}) that cannot be rolled back; "
                "create it with fastforward.core.cache.new_cache"
            )
    return list(cache.layers)


def cache_length(cache: DynamicCache) -> int:
    return int(cache.get_seq_length())


def rollback(cache: DynamicCache, length: int) -> None:
    """Drop every cached position at or after ``length`` (keep the first ``length``)."""
    full_layers(cache)
    current = cache_length(cache)
    if length < 0 or length > current:
        raise ValueError(f"cannot roll back a cache of length {current} to {length}")
    if length < current:
        cache.crop(length - current)


def keep_positions(cache: DynamicCache, start: int, keep: Sequence[int]) -> None:
    """After a forward that appended entries at ``start``, keep only those at offsets ``keep`` (relative to
    ``start``, ascending), so the cache holds the accepted path contiguously.

    The kept entries are written in place over the slots ``start, start + 1, ...`` (only those not already
    there move), then the cache is cropped: no layer is rebuilt, whatever the path."""
    keep = list(keep)
    if any(b <= a for a, b in zip(keep, keep[1:], strict=False)):
        raise ValueError(f"keep must be ascending, got {keep}")
    moved = [(i, k) for i, k in enumerate(keep) if k != i]
    if moved:
        dst = torch.tensor([start + i for i, _ in moved], dtype=torch.long)
        src = torch.tensor([start + k for _, k in moved], dtype=torch.long)
        for layer in full_layers(cache):
            for attr in ("keys", "values"):
                t = getattr(layer, attr)
                # src > dst everywhere, and index_select copies first, so overlapping moves are safe
                t.index_copy_(2, dst.to(t.device), t.index_select(2, src.to(t.device)))
    rollback(cache, start + len(keep))


# --------------------------------------------------------------------------- batch rows (left-padded)


def left_pad(cache: DynamicCache, amount: int) -> None:
    """Insert ``amount`` empty (masked) positions before every row's entries."""
    if amount <= 0:
        return
    for layer in full_layers(cache):
        for attr in ("keys", "values"):
            t = getattr(layer, attr)
            z = t.new_zeros(t.shape[0], t.shape[1], amount, t.shape[3])
            setattr(layer, attr, torch.cat([z, t], dim=2))


def trim_left(cache: DynamicCache, amount: int) -> None:
    """Drop the first ``amount`` positions of every row (padding no row needs any more)."""
    if amount <= 0:
        return
    for layer in full_layers(cache):
        layer.keys = layer.keys[:, :, amount:]
        layer.values = layer.values[:, :, amount:]


def select_rows(cache: DynamicCache, rows: Sequence[int]) -> None:
    """Keep only the batch rows ``rows``, in that order."""
    idx = torch.tensor(list(rows), dtype=torch.long)
    for layer in full_layers(cache):
        layer.keys = layer.keys.index_select(0, idx.to(layer.keys.device))
        layer.values = layer.values.index_select(0, idx.to(layer.values.device))


def append_rows(cache: DynamicCache, other: DynamicCache) -> None:
    """Append ``other``'s rows after ``cache``'s (same length: left-pad the shorter one first)."""
    for a, b in zip(full_layers(cache), full_layers(other), strict=True):
        a.keys = torch.cat([a.keys, b.keys], dim=0)
        a.values = torch.cat([a.values, b.values], dim=0)

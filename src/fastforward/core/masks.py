"""Attention masks and position ids for verifying many candidate tokens in one forward.

Every parallel method feeds k new tokens after a cached prefix of length P. Which new token may see which
is a boolean matrix ``visible[i, j]`` (query i sees key j among the new tokens); every new token sees the
whole prefix. transformers accepts the result as a 4D additive mask ``[B, 1, q, kv]`` together with
explicit ``position_ids``: the public interface, no patched attention.

Sliding-window layers see a key only when ``query position - key position < window`` (transformers'
convention). A custom 4D mask replaces the model's own masks for every layer, so for such models
:func:`model_mask` also builds the windowed mask from the *position ids* (which is what AR's own masks
compare) and hands the model one mask per layer type (``{"full_attention": ..., "sliding_attention": ...}``,
the form transformers' hybrid models accept), or the windowed mask alone when every layer slides.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from fastforward.core.cache import sliding_window, text_config

Mask = torch.Tensor | dict[str, torch.Tensor]


def tree_visibility(parents: Sequence[int]) -> torch.Tensor:
    """Token i sees itself and its ancestors. ``parents[i]`` is the index of i's parent, -1 for a root.

    Parents must come before children. [k, k] bool.
    """
    k = len(parents)
    vis = torch.zeros(k, k, dtype=torch.bool)
    for i, p in enumerate(parents):
        if p >= i:
            raise ValueError(f"parent {p} of node {i} must come before it")
        vis[i, i] = True
        if p >= 0:
            vis[i] |= vis[p]
    return vis


def tree_depths(parents: Sequence[int]) -> list[int]:
    depths: list[int] = []
    for p in parents:
        depths.append(0 if p < 0 else depths[p] + 1)
    return depths


def positions(depths: Sequence[int], prefix_len: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """Position ids [1, k]: prefix_len + depth of each new token (depth = index for a chain)."""
    return (torch.tensor(list(depths), dtype=torch.long, device=device) + prefix_len)[None]


def additive(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """[B, q, kv] bool (True = attend) -> [B, 1, q, kv] additive mask (0 = attend, dtype min = blocked)."""
    mask = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
    return mask.masked_fill_(~allowed, torch.finfo(dtype).min)[:, None]


def windowed(allowed: torch.Tensor, q_pos: torch.Tensor, kv_pos: torch.Tensor, window: int) -> torch.Tensor:
    """Restrict ``allowed`` [B, q, kv] to keys less than ``window`` positions behind their query.

    q_pos: [B, q] and kv_pos: [B, kv] position ids."""
    return allowed & (q_pos[:, :, None] - kv_pos[:, None, :] < window)


def model_mask(
    model: torch.nn.Module,
    allowed: torch.Tensor,
    q_pos: torch.Tensor,
    kv_pos: torch.Tensor,
    dtype: torch.dtype,
) -> Mask:
    """The attention mask to pass to ``model``: additive 4D, windowed per layer type where layers slide."""
    window = sliding_window(model)
    if window is None:
        return additive(allowed, dtype)
    slide = additive(windowed(allowed, q_pos, kv_pos, window), dtype)
    types = set(getattr(text_config(model), "layer_types", None) or ["sliding_attention"])
    if types == {"sliding_attention"}:
        return slide
    return {t: slide if t == "sliding_attention" else additive(allowed, dtype) for t in types}


def tree_mask(
    model: torch.nn.Module,
    visible: torch.Tensor,
    depths: Sequence[int],
    prefix_len: int,
    dtype: torch.dtype,
    device: torch.device | str = "cpu",
) -> Mask:
    """Mask for k new tokens (a tree: ``visible`` [k, k], ``depths`` [k]) after a cached prefix of
    ``prefix_len`` tokens at positions 0..prefix_len - 1; the new tokens sit at prefix_len + depth."""
    k = visible.shape[0]
    allowed = torch.ones(1, k, prefix_len + k, dtype=torch.bool, device=device)
    allowed[0, :, prefix_len:] = visible.to(device)
    q_pos = positions(depths, prefix_len, device)
    kv_pos = torch.cat([torch.arange(prefix_len, device=device)[None], q_pos], dim=1)
    return model_mask(model, allowed, q_pos, kv_pos, dtype)


def padded_prefill_mask(
    model: torch.nn.Module, pads: Sequence[int], length: int, dtype: torch.dtype, device: torch.device | str
) -> Mask:
    """Causal mask for left-padded rows [B, length]; row b's first pads[b] slots are padding that no real
    token sees (a pad query sees only itself, so no row is empty). Positions count from each row's start."""
    b = len(pads)
    allowed = torch.ones(length, length, dtype=torch.bool).tril().expand(b, length, length).clone()
    for i, p in enumerate(pads):
        allowed[i, :, :p] = False
        allowed[i, torch.arange(p), torch.arange(p)] = True
    pos = torch.arange(length)[None] - torch.tensor(list(pads))[:, None]
    return _to(model_mask(model, allowed, pos, pos, dtype), device)


def padded_block_mask(
    model: torch.nn.Module,
    pads: Sequence[int],
    cache_len: int,
    n: int,
    dtype: torch.dtype,
    device: torch.device | str,
) -> Mask:
    """Mask for an n-token causal block after a left-padded cache of ``cache_len`` slots per row.

    Row b hides its first pads[b] slots; its block sits at positions cache_len - pads[b] + 0..n-1."""
    b = len(pads)
    allowed = torch.ones(b, n, cache_len + n, dtype=torch.bool)
    for i, p in enumerate(pads):
        allowed[i, :, :p] = False
    allowed[:, :, cache_len:] = torch.ones(n, n, dtype=torch.bool).tril()
    kv_pos = torch.arange(cache_len + n)[None] - torch.tensor(list(pads))[:, None]
    return _to(model_mask(model, allowed, kv_pos[:, cache_len:], kv_pos, dtype), device)


def _to(mask: Mask, device: torch.device | str) -> Mask:
    if isinstance(mask, dict):
        return {k: v.to(device) for k, v in mask.items()}
    return mask.to(device)

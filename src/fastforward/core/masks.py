"""Attention masks and position ids for verifying many candidate tokens in one forward.

Every parallel method feeds k new tokens after a cached prefix of length P. Which new token may see which
is a boolean matrix ``visible[i, j]`` (query i sees key j among the new tokens); every new token sees the
whole prefix. transformers accepts the result as a 4D additive mask ``[1, 1, k, P + k]`` together with
explicit ``position_ids``: the public interface, no patched attention.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def causal_visibility(k: int) -> torch.Tensor:
    """Plain causal: token i sees tokens 0..i. [k, k] bool."""
    return torch.ones(k, k, dtype=torch.bool).tril()


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


def additive_mask(
    visible: torch.Tensor, prefix_len: int, dtype: torch.dtype, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """[k, k] bool visibility -> [1, 1, k, prefix_len + k] additive mask (0 = attend, min = blocked)."""
    k = visible.shape[0]
    full = torch.ones(k, prefix_len + k, dtype=torch.bool, device=device)
    full[:, prefix_len:] = visible.to(device)
    mask = torch.zeros(k, prefix_len + k, dtype=dtype, device=device)
    mask.masked_fill_(~full, torch.finfo(dtype).min)
    return mask[None, None]


def positions(depths: Sequence[int], prefix_len: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """Position ids [1, k]: prefix_len + depth of each new token (depth = index for a chain)."""
    return (torch.tensor(list(depths), dtype=torch.long, device=device) + prefix_len)[None]

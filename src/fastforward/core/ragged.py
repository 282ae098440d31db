"""Rows of different lengths in one KV cache: the two layouts a batched forward can use.

:class:`PaddedRows` (the default) is described first; :class:`PackedRows` (every row's block in one
sequence, no padding, a shared single-row cache with per-row slot lists) at its class.

Padded layout (left-aligned, compacted). Row b's cached tokens sit in slots ``0 .. lengths[b] - 1`` of the batch
cache; slots from ``lengths[b]`` up to the cache's length are stale for that row and every mask hides them. A
forward appends its k new slots at the common end ``C`` (transformers' cache update concatenates), each row's
tokens at its *own* positions (``lengths[b] + depth``), so a row's numerics do not depend on the others. After
acceptance, :func:`compact` moves the entries a row keeps from ``C + node`` down to ``lengths[b] + i`` (one
gather and one scatter per layer over the kept entries only) and crops the cache to the longest row.

Why this and not the alternatives: left padding with a common end would need every row that accepted fewer
tokens than the best one to be shifted (a copy of its whole row) or to keep growing holes; masking the
rejected slots in place (no copy at all) grows the cache by k slots per step whatever was accepted, so
attention and memory would scale with forwards instead of tokens. Compaction moves only accepted entries
(a few per row per step), keeps the cache as short as the longest row plus one block, and makes joining and
leaving plain row operations (:func:`join`, :func:`select`), which is what continuous batching needs.

Masks are 4D additive ``[B, 1, k, C + k]`` built by :func:`fastforward.core.masks.model_mask` (windowed per
layer type on sliding-window models), with explicit per-row ``position_ids``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch
from transformers import DynamicCache

from fastforward.core.cache import cache_length, full_layers, rollback, select_rows
from fastforward.core.masks import Mask, model_mask, tree_depths, tree_visibility


@dataclass(frozen=True)
class Block:
    """What one row feeds a forward: tokens with their tree parents (-1 for the root; a chain is
    ``[-1, 0, 1, ...]``). Node 0 is normally the row's anchor (its last committed token)."""

    tokens: list[int]
    parents: list[int]

    @staticmethod
    def chain(tokens: Sequence[int]) -> Block:
        return Block([int(t) for t in tokens], list(range(-1, len(tokens) - 1)))


def chain_parents(k: int) -> list[int]:
    return list(range(-1, k - 1))


def block_geometry(blk: Block) -> tuple[list[int], torch.Tensor]:
    """Depth of every node below the anchor and which nodes each node sees ([m, m] bool): a lower
    triangle for a chain, ancestors for a tree."""
    m = len(blk.tokens)
    if blk.parents == chain_parents(m):
        return list(range(m)), torch.ones(m, m, dtype=torch.bool).tril()
    return tree_depths(blk.parents), tree_visibility(blk.parents)


def _on(mask: Mask, device: torch.device | str) -> Mask:
    """The model's mask (a tensor, or per-layer-type dict of them) moved to ``device``."""
    return {key: v.to(device) for key, v in mask.items()} if isinstance(mask, dict) else mask.to(device)


def block_inputs(
    model: torch.nn.Module,
    lengths: Sequence[int],
    blocks: Sequence[Block],
    cache_len: int,
    pad_id: int,
    dtype: torch.dtype,
    device: torch.device | str,
) -> tuple[torch.Tensor, torch.Tensor, Mask | None]:
    """input_ids [B, k], position_ids [B, k] and the 4D mask for one ragged forward.

    Row b sees its own first ``lengths[b]`` cached slots and, among the new ones, its tree's ancestors; pad
    nodes (rows whose block is shorter than k) see the row's prefix and themselves, and nobody sees them.
    Returns mask None when the model's own causal mask is exact (every row a chain of the same length
    with no stale slots): then the model builds it, as in AR."""
    b, k = len(blocks), max(len(blk.tokens) for blk in blocks)
    chains = all(blk.parents == chain_parents(len(blk.tokens)) for blk in blocks)
    if chains and all(n == cache_len for n in lengths) and all(len(blk.tokens) == k for blk in blocks):
        ids = torch.tensor([blk.tokens for blk in blocks], dtype=torch.long)
        pos = torch.arange(cache_len, cache_len + k)[None].expand(b, k)
        return ids.to(device), pos.to(device), None
    ids = torch.full((b, k), pad_id, dtype=torch.long)
    pos = torch.zeros((b, k), dtype=torch.long)
    allowed = torch.zeros((b, k, cache_len + k), dtype=torch.bool)
    eye = torch.eye(k, dtype=torch.bool)
    for r, (n, blk) in enumerate(zip(lengths, blocks, strict=True)):
        m = len(blk.tokens)
        ids[r, :m] = torch.tensor(blk.tokens, dtype=torch.long)
        depths, vis = block_geometry(blk)
        pos[r, :m] = torch.tensor(depths, dtype=torch.long) + n
        pos[r, m:] = n
        allowed[r, :, :n] = True
        allowed[r, :, cache_len:] = eye
        allowed[r, :m, cache_len : cache_len + m] = vis
    kv_pos = torch.cat([torch.arange(cache_len)[None].expand(b, cache_len), pos], dim=1)
    return ids.to(device), pos.to(device), _on(model_mask(model, allowed, pos, kv_pos, dtype), device)


def compact(
    cache: DynamicCache, start: int, lengths: Sequence[int], keeps: Sequence[Sequence[int]]
) -> list[int]:
    """After a forward that appended every row's block at slot ``start``, keep for row b the block nodes
    ``keeps[b]`` (ascending), moved to slots ``lengths[b], lengths[b] + 1, ...``; crop to the longest row.

    Returns the new lengths. Only entries that are not already in place move (sources are never before
    their destinations, and the gather happens before the scatter, so overlaps are safe)."""
    rows: list[int] = []
    dst: list[int] = []
    src: list[int] = []
    new_lengths = []
    for r, (n, keep) in enumerate(zip(lengths, keeps, strict=True)):
        for i, node in enumerate(keep):
            if n + i != start + node:
                rows.append(r)
                dst.append(n + i)
                src.append(start + node)
        new_lengths.append(n + len(keep))
    if rows:
        layers = full_layers(cache)
        dev = layers[0].keys.device
        r_t = torch.tensor(rows, dtype=torch.long, device=dev)
        d_t = torch.tensor(dst, dtype=torch.long, device=dev)
        s_t = torch.tensor(src, dtype=torch.long, device=dev)
        for layer in layers:
            for attr in ("keys", "values"):
                t = getattr(layer, attr)
                t[r_t, :, d_t] = t[r_t, :, s_t]
    rollback(cache, max(new_lengths, default=0))
    return new_lengths


def right_pad(cache: DynamicCache, length: int) -> None:
    """Grow every layer to ``length`` slots with zeros at the end (stale slots no mask lets a row see)."""
    grow = length - cache_length(cache)
    if grow <= 0:
        return
    for layer in full_layers(cache):
        for attr in ("keys", "values"):
            t = getattr(layer, attr)
            setattr(layer, attr, torch.cat([t, t.new_zeros(t.shape[0], t.shape[1], grow, t.shape[3])], dim=2))


def join(cache: DynamicCache | None, other: DynamicCache) -> DynamicCache:
    """Rows of ``other`` appended after those of ``cache`` (None: ``other`` becomes the batch)."""
    if cache is None:
        return other
    length = max(cache_length(cache), cache_length(other))
    right_pad(cache, length)
    right_pad(other, length)
    for a, b in zip(full_layers(cache), full_layers(other), strict=True):
        a.keys = torch.cat([a.keys, b.keys], dim=0)
        a.values = torch.cat([a.values, b.values], dim=0)
    return cache


def select(cache: DynamicCache, rows: Sequence[int], lengths: Sequence[int]) -> None:
    """Keep only batch rows ``rows`` (in that order; ``lengths`` are theirs) and crop to the longest."""
    select_rows(cache, rows)
    rollback(cache, max(lengths, default=0))


# --------------------------------------------------------------------------- the two layouts


class Verified(NamedTuple):
    """What one layout forward gives back, per row b (its ``m_b`` block nodes): ``logits[b]`` [m_b, V],
    ``argmax[b]`` the greedy token after every node (one argmax over the whole forward), ``hidden[b]`` the
    last hidden states [m_b, d] (None unless asked), and ``fed``: positions fed, padding included."""

    logits: list[torch.Tensor]
    argmax: list[list[int]]
    hidden: list[torch.Tensor] | None
    fed: int


class PaddedRows:
    """Rows side by side, ``[B, k]`` forwards: every row fed as wide as the widest block (pad nodes attend
    only to themselves and are dropped), the cache ``[B, H, max_len, D]`` compacted after every step
    (:func:`compact`). Attention reads only a row's own keys; the price is the padding when rows guess
    different numbers of tokens (``padding_share`` in the batch stats)."""

    name = "padded"

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self.cache: DynamicCache | None = None
        self.lengths: list[int] = []

    def add(self, cache: DynamicCache, length: int) -> None:
        self.cache = join(self.cache, cache)
        self.lengths.append(length)

    def forward(self, blocks: Sequence[Block], pad_id: int, hidden: bool) -> Verified:
        """One forward over every row's block."""
        m = self.model
        dtype, device = next(m.parameters()).dtype, next(m.parameters()).device
        self._start = cache_length(self.cache)
        ids, pos, mask = block_inputs(m, self.lengths, blocks, self._start, pad_id, dtype, device)
        out = m(
            input_ids=ids, position_ids=pos, attention_mask=mask, past_key_values=self.cache,
            use_cache=True, output_hidden_states=hidden,
        )  # fmt: skip
        sizes = [len(b.tokens) for b in blocks]
        logits = [out.logits[r, :n] for r, n in enumerate(sizes)]
        argmax = [a[:n] for a, n in zip(out.logits.argmax(-1).tolist(), sizes, strict=True)]
        states = [out.hidden_states[-1][r, :n] for r, n in enumerate(sizes)] if hidden else None
        return Verified(logits, argmax, states, ids.numel())

    def keep(self, paths: Sequence[Sequence[int]]) -> None:
        self.lengths = compact(self.cache, self._start, self.lengths, paths)

    def retain(self, keep: Sequence[int]) -> None:
        self.lengths = [self.lengths[i] for i in keep]
        if keep:
            select(self.cache, keep, self.lengths)
        else:
            self.cache = None


class PackedRows:
    """Rows one after another in ONE sequence, ``[1, sum k_b]`` forwards: no padding, each row fed only its
    own block; the cache is a single row ``[1, H, S, D]`` holding every row's entries, each row owning a
    list of slots (in position order), with a 4D mask letting a row's tokens see only its slots.

    Every forward appends its nodes at the end; a row keeps the slots of its accepted nodes, the rest
    are dead until a garbage collection (an ``index_select`` of the live slots, row by row) runs once dead
    slots outnumber live ones, so moving entries costs O(1) per token amortised. The price: every query
    scores every row's keys (masked), so attention grows with the batch; for small models with short
    contexts it is the linear layers that dominate, and those cost only the real tokens."""

    name = "packed"

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self.cache: DynamicCache | None = None
        self.slots: list[list[int]] = []
        self.slot_pos: list[int] = []  # position id of every cache slot (windowed masks compare them)

    @property
    def lengths(self) -> list[int]:
        return [len(s) for s in self.slots]

    def add(self, cache: DynamicCache, length: int) -> None:
        start = 0 if self.cache is None else cache_length(self.cache)
        if self.cache is None:
            self.cache = cache
        else:
            for a, b in zip(full_layers(self.cache), full_layers(cache), strict=True):
                a.keys = torch.cat([a.keys, b.keys], dim=2)
                a.values = torch.cat([a.values, b.values], dim=2)
        self.slots.append(list(range(start, start + length)))
        self.slot_pos += list(range(length))

    def forward(self, blocks: Sequence[Block], pad_id: int, hidden: bool) -> Verified:
        """One forward over every row's block (``pad_id`` unused: nothing is padded)."""
        m = self.model
        dtype, device = next(m.parameters()).dtype, next(m.parameters()).device
        start = cache_length(self.cache)
        sizes = [len(b.tokens) for b in blocks]
        n = sum(sizes)
        ids: list[int] = []
        pos: list[int] = []
        allowed = torch.zeros((1, n, start + n), dtype=torch.bool)
        off = 0
        self._offsets = []
        for blk, slots in zip(blocks, self.slots, strict=True):
            k = len(blk.tokens)
            depths, vis = block_geometry(blk)
            ids += blk.tokens
            pos += [len(slots) + d for d in depths]
            allowed[0, off : off + k].index_fill_(1, torch.tensor(slots, dtype=torch.long), True)
            allowed[0, off : off + k, start + off : start + off + k] = vis
            self._offsets.append(off)
            off += k
        q_pos = torch.tensor([pos], dtype=torch.long)
        kv_pos = torch.tensor([self.slot_pos + pos], dtype=torch.long)
        mask = _on(model_mask(m, allowed, q_pos, kv_pos, dtype), device)
        out = m(
            input_ids=torch.tensor([ids], device=device), position_ids=q_pos.to(device), attention_mask=mask,
            past_key_values=self.cache, use_cache=True, output_hidden_states=hidden,
        )  # fmt: skip
        self._start = start
        self.slot_pos += pos
        spans = [(o, o + k) for o, k in zip(self._offsets, sizes, strict=True)]
        flat = out.logits[0].argmax(-1).tolist()
        logits = [out.logits[0, a:b] for a, b in spans]
        states = [out.hidden_states[-1][0, a:b] for a, b in spans] if hidden else None
        return Verified(logits, [flat[a:b] for a, b in spans], states, n)

    def keep(self, paths: Sequence[Sequence[int]]) -> None:
        for slots, off, path in zip(self.slots, self._offsets, paths, strict=True):
            slots += [self._start + off + i for i in path]
        self._collect()

    def retain(self, keep: Sequence[int]) -> None:
        self.slots = [self.slots[i] for i in keep]
        self._collect()

    def _collect(self) -> None:
        """Drop dead slots once they outnumber the live ones (or nothing is live)."""
        live = sum(len(s) for s in self.slots)
        if live == 0:
            self.cache, self.slots, self.slot_pos = None, [], []
            return
        if cache_length(self.cache) - live <= live:
            return
        order = [i for s in self.slots for i in s]
        idx = torch.tensor(order, dtype=torch.long, device=self.cache.layers[0].keys.device)
        for layer in full_layers(self.cache):
            layer.keys = layer.keys.index_select(2, idx)
            layer.values = layer.values.index_select(2, idx)
        self.slot_pos = [self.slot_pos[i] for i in order]
        new, at = [], 0
        for s in self.slots:
            new.append(list(range(at, at + len(s))))
            at += len(s)
        self.slots = new


LAYOUTS = {"padded": PaddedRows, "packed": PackedRows}

"""The second batch layout, :class:`PackedRows`, beside the engine's padded rows.

The default layout is the engine itself (:class:`fastforward.core.engine.ModelEngine`, its docstring has the
padded layout); :class:`PackedRows` feeds every row's block in one sequence, no padding, a shared single-row
cache with per-row slot lists. The names that moved to :mod:`fastforward.core.engine` are re-exported here.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch
from transformers import DynamicCache

from fastforward.core.cache import cache_length, full_layers
from fastforward.core.call import model_call
from fastforward.core.engine import (
    Block,
    Forward,
    ModelEngine,
    _on,
    block_geometry,
    block_inputs,
    chain_parents,
    compact,
    select,
)
from fastforward.core.masks import model_mask

__all__ = [
    "LAYOUTS", "Block", "Forward", "ModelEngine", "PackedRows", "block_geometry", "block_inputs",
    "chain_parents", "compact", "select",
]  # fmt: skip


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

    def forward(self, blocks: Sequence[Block], pad_id: int = 0, hidden: bool = False) -> Forward:
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
        t0 = time.perf_counter()
        out = model_call(
            m, torch.tensor([ids], device=device), q_pos.to(device), mask, self.cache, hidden=hidden
        )
        ms = (time.perf_counter() - t0) * 1e3
        self._start = start
        self.slot_pos += pos
        spans = [(o, o + k) for o, k in zip(self._offsets, sizes, strict=True)]
        # rows as a [B, k_max, V] batch (a copy: the engine's Forward reads per-row slices and one argmax)
        rows = torch.nn.utils.rnn.pad_sequence([out.logits[0, a:b] for a, b in spans], batch_first=True)
        states = [out.hidden_states[-1][0, a:b] for a, b in spans] if hidden else None
        return Forward(rows, sizes, states, n, ms)

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


LAYOUTS = {"padded": ModelEngine, "packed": PackedRows}

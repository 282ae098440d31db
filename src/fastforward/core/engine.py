"""The one place the target model runs a decoding forward: :class:`ModelEngine`.

Every method's step is the same three moves on the target: feed each row a *block* (its anchor, the last
committed token, plus guesses arranged as a tree, :class:`Block`) at explicit positions with that row's
mask, read the logits, then keep the accepted path of each row's block in the KV cache (:meth:`ModelEngine.keep`;
rolling back a rejected draft is keeping a prefix of its chain). The one step every method runs, at batch 1
and in a batch (:func:`fastforward.core.batching.verify_step`), goes through here, so the forward, its
positions and masks, the cache surgery, the compiled forwards per width bucket and the forward timing live
once, not in the methods.

Layout (left-aligned rows, compacted). Row b's cached tokens sit in slots ``0 .. lengths[b] - 1`` of the batch
cache; slots from ``lengths[b]`` up to the cache's length are stale for that row and every mask hides them. The
cache is static (:class:`fastforward.core.cache.SlotCache`: buffers preallocated for the request, written in
place, so a step copies nothing and a rollback is a length). A forward writes its k new slots at the common end
``C``, each row's tokens at its *own* positions (``lengths[b] + depth``), so a row's numerics do not depend on the others. After
acceptance, :func:`compact` moves the entries a row keeps from ``C + node`` down to ``lengths[b] + i`` (one
gather and one scatter per layer over the kept entries only) and crops the cache to the longest row.

Why this and not the alternatives: left padding with a common end would need every row that accepted fewer
tokens than the best one to be shifted (a copy of its whole row) or to keep growing holes; masking the
rejected slots in place (no copy at all) grows the cache by k slots per step whatever was accepted, so
attention and memory would scale with forwards instead of tokens. Compaction moves only accepted entries
(a few per row per step), keeps the cache as short as the longest row plus one block, and makes joining and
leaving plain row operations (:meth:`ModelEngine.add`, :func:`select`), which is what continuous batching needs.

Masks: None (the model's own causal mask, as plain AR passes) when every row feeds a chain of the same length
with no stale slots; otherwise 4D additive ``[B, 1, k, C + k]`` from :func:`fastforward.core.masks.model_mask`
(windowed per layer type on sliding-window models), always with explicit per-row ``position_ids``.

Draft models run on engines of their own: the batch-1 drafter feeds its row with :meth:`ModelEngine.feed`
(next-token logits only, or the hidden state for a reduced-vocabulary head), the batched draft proposer
steps its rows with :meth:`ModelEngine.forward`. Still outside: the packed batch layout (listed in
tests/test_architecture.py until it moves here or goes), and, outside core/ and decoders/, CLLM's trajectory
collection and the cost-curve probe.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

import torch
from transformers.cache_utils import Cache

from fastforward.core.cache import (
    FixedCache,
    SlotCache,
    cache_length,
    full_layers,
    new_cache,
    rollback,
    select_rows,
    sliding_window,
    slot_rows,
)
from fastforward.core.call import model_call
from fastforward.core.compiled import BUCKETS, DEFAULT_CAPACITY, CompiledForward, bucket, compiled
from fastforward.core.masks import Mask, additive, model_mask, tree_depths, tree_visibility


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
    """Depth of every node below the anchor and which nodes each node sees ([m, m] bool, read only): a
    lower triangle for a chain, ancestors for a tree."""
    return _geometry(tuple(blk.parents))


@functools.lru_cache(maxsize=256)  # a method's trees recur (lookahead's layouts, Chimera's sized trees)
def _geometry(parents: tuple[int, ...]) -> tuple[list[int], torch.Tensor]:
    m = len(parents)
    if list(parents) == chain_parents(m):
        return list(range(m)), torch.ones(m, m, dtype=torch.bool).tril()
    return tree_depths(parents), tree_visibility(parents)


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
    width: int = 0,
    span: int = 0,
) -> tuple[torch.Tensor, torch.Tensor, Mask | None]:
    """input_ids [B, k], position_ids [B, k] and the 4D mask for one ragged forward.

    Row b sees its own first ``lengths[b]`` cached slots and, among the new ones, its tree's ancestors; pad
    nodes (rows whose block is shorter than k) see the row's prefix and themselves, and nobody sees them.
    Returns mask None when the model's own causal mask is exact (every row a chain of the same length
    with no stale slots): then the model builds it, as in AR.

    Fixed shapes (a compiled graph): ``width`` pads k up to that many nodes and ``span`` makes the mask
    cover that many cache slots (the whole fixed cache, slots past ``cache_len + width`` hidden); the mask
    is then always built."""
    b, k = len(blocks), max((len(blk.tokens) for blk in blocks), default=0)
    k = max(k, width)
    chains = all(blk.parents == chain_parents(len(blk.tokens)) for blk in blocks)
    exact = all(n == cache_len for n in lengths) and all(len(blk.tokens) == k for blk in blocks)
    if chains and exact and not span:
        ids = torch.tensor([blk.tokens for blk in blocks], dtype=torch.long)
        pos = torch.arange(cache_len, cache_len + k)[None].expand(b, k)
        return ids.to(device), pos.to(device), None
    slots = max(span, cache_len + k)
    window = sliding_window(model)
    if chains and b == 1 and len(blocks[0].tokens) == k and lengths[0] == cache_len and window is None:
        # a plain chain over a fixed cache (every AR step, a full-width draft): its mask is a slice of one
        # made in advance; after a compiled forward has streamed the weights through the CPU's caches, each
        # small tensor op of building it costs ~10 us, so ~15 of them were ~2.5% of a 1-token step
        ids = torch.tensor([blocks[0].tokens], dtype=torch.long)
        pos = torch.arange(cache_len, cache_len + k)[None]
        mask = _causal(k, slots, dtype)[..., slots - cache_len : 2 * slots - cache_len].contiguous()
        return ids.to(device), pos.to(device), mask.to(device)
    geometry = [block_geometry(blk) for blk in blocks]
    ids = torch.tensor([[*blk.tokens, *[pad_id] * (k - len(blk.tokens))] for blk in blocks], dtype=torch.long)
    pos = torch.tensor(
        [
            [n + d for d in depths] + [n] * (k - len(depths))
            for n, (depths, _) in zip(lengths, geometry, strict=True)
        ],
        dtype=torch.long,
    )
    # Built for the whole batch at once, not slot range by slot range per row: a step's inputs are ~10 small
    # tensor ops instead of ~25, which is what they cost next to a ~10 ms compiled forward (0.3 ms before)
    new = _eye(k).expand(b, k, k).clone()  # every node sees itself (a pad node only itself) ...
    for r, (_, vis) in enumerate(geometry):
        new[r, : vis.shape[0], : vis.shape[0]] = vis  # ... and a block's nodes their ancestors
    # row b sees its prefix (slots < lengths[b] <= cache_len), then its block
    prefix = _arange(slots)[None, None] < torch.tensor(list(lengths))[:, None, None]
    allowed = prefix.expand(b, k, slots).clone()
    allowed[:, :, cache_len : cache_len + k] = new
    if window is None:  # no window: the key positions are not needed
        return ids.to(device), pos.to(device), _on(additive(allowed, dtype), device)
    rest = _arange(slots)[cache_len + k :][None].expand(b, slots - cache_len - k)  # hidden, any position
    kv_pos = torch.cat([_arange(slots)[:cache_len][None].expand(b, cache_len), pos, rest], dim=1)
    return ids.to(device), pos.to(device), _on(model_mask(model, allowed, pos, kv_pos, dtype), device)


@functools.lru_cache(maxsize=16)
def _arange(n: int) -> torch.Tensor:
    """``arange(n)``, made once per size (read only)."""
    return torch.arange(n)


@functools.lru_cache(maxsize=32)
def _causal(k: int, slots: int, dtype: torch.dtype) -> torch.Tensor:
    """The additive mask of ``k`` chained queries over ``2 * slots`` keys, query i seeing keys up to
    ``slots + i`` (read only): its keys ``slots - C .. 2 * slots - C`` are the mask of a chain fed after C
    cached tokens into a fixed cache of ``slots`` slots."""
    keys = torch.arange(2 * slots)[None] <= slots + torch.arange(k)[:, None]
    return additive(keys[None], dtype)


@functools.lru_cache(maxsize=16)
def _eye(k: int) -> torch.Tensor:
    """``eye(k)`` as bool, made once per size (read only)."""
    return torch.eye(k, dtype=torch.bool)


def compact(cache: Cache, start: int, lengths: Sequence[int], keeps: Sequence[Sequence[int]]) -> list[int]:
    """After a forward that appended every row's block at slot ``start``, keep for row b the block nodes
    ``keeps[b]`` (ascending), moved to slots ``lengths[b], lengths[b] + 1, ...``; crop to the longest row.

    Returns the new lengths. Only entries that are not already in place move (sources are never before
    their destinations, and the gather happens before the scatter, so overlaps are safe)."""
    rows: list[int] = []
    dst: list[int] = []
    src: list[int] = []
    new_lengths = []
    for r, (n, keep) in enumerate(zip(lengths, keeps, strict=True)):
        if any(b <= a for a, b in pairwise(keep)) or (len(keep) and keep[0] < 0):
            raise ValueError(f"a kept path must be ascending block nodes, got {list(keep)}")
        for i, node in enumerate(keep):
            if n + i != start + node:
                rows.append(r)
                dst.append(n + i)
                src.append(start + node)
        new_lengths.append(n + len(keep))
    if rows:
        layers = full_layers(cache)
        dev = layers[0].keys.device
        d_t = torch.tensor(dst, dtype=torch.long, device=dev)
        s_t = torch.tensor(src, dtype=torch.long, device=dev)
        # batch 1: a plain slot move, ~2/3 of a row-indexed one's time
        r_t = None if len(lengths) == 1 else torch.tensor(rows, dtype=torch.long, device=dev)
        for layer in layers:
            for attr in ("keys", "values"):
                t = getattr(layer, attr)
                if r_t is None:
                    t.index_copy_(2, d_t, t.index_select(2, s_t))
                else:
                    t[r_t, :, d_t] = t[r_t, :, s_t]
    rollback(cache, max(new_lengths, default=0))
    return new_lengths


def select(cache: Cache, rows: Sequence[int], lengths: Sequence[int]) -> None:
    """Keep only batch rows ``rows`` (in that order; ``lengths`` are theirs) and crop to the longest."""
    select_rows(cache, rows)
    rollback(cache, max(lengths, default=0))


def compile_forward(
    model: torch.nn.Module,
    capacity: int = DEFAULT_CAPACITY,
    mode: str | None = "max-autotune",
    store: Path | None = None,
    widths: Sequence[int] | None = None,
) -> CompiledForward:
    """Give ``model`` compiled decoding forwards (:mod:`fastforward.core.compiled`) over a fixed cache of
    ``capacity`` slots: a plain attribute read by :class:`ModelEngine`; the model itself is not changed and
    nothing compiles until a width bucket is first used. ``store``: a directory where each compiled
    forward is kept as an AOTInductor package (CPU), so later processes load it instead of compiling."""
    runner = CompiledForward(model, model_call, capacity, mode, store, widths)
    model.fastforward_compiled = runner
    return runner


def compile_draft(draft: torch.nn.Module, target: torch.nn.Module) -> CompiledForward | None:
    """Give a draft model (a smaller model, a quantized copy or a layer view of the target) compiled forwards
    like its target's (same capacity, mode and package store) when the target has them, so ``--compile on``
    covers the whole step: eagerly, a token of SmolLM2's int8 copy cost about a compiled fp32 target step,
    so qsd could not pay (0.90-0.95x of compiled AR in session 31; 0.96-1.11x with the draft compiled). The
    draft's engine runs only the 1-token graph (:meth:`ModelEngine.feed`), so it compiles one package per
    cache size."""
    runner = compiled(target)
    if runner is None or compiled(draft) is not None:
        return compiled(draft)
    return compile_forward(draft, runner.capacity, runner.mode, runner.store)


PREFILL_CHUNK = 512  # prompt tokens per prefill forward: bounds attention's [heads, chunk, context] scores
DRAFT_ROOM = 256  # slots a compiled draft's fixed cache keeps free past its prompt, unless told its request's
DRAFT_SPLIT = 4  # a compiled draft feeds up to this many tokens one by one through its 1-token graph


def prefill(
    model: torch.nn.Module,
    ids: torch.Tensor,
    hidden: bool = False,
    cache: Any = None,
    chunk: int = PREFILL_CHUNK,
) -> tuple[Any, Any]:
    """A KV cache holding the prompt ``ids`` [1, T] (``cache``, empty, or a fresh dynamic one), and the model
    output with only the last position's logits (the first new token; ``hidden``: every prompt position's
    hidden states too). The prompt is one row; the batched scheduler prefills each request this way before
    :meth:`ModelEngine.add` joins it to the batch.

    A long prompt goes in ``chunk`` tokens per forward, each after the cache the earlier ones filled: one
    forward of T tokens scores ``heads x T x T`` attention weights (~3 GB at T = 8k for a 12-head model),
    chunks ``heads x chunk x T``; on a CPU the prefill is compute-bound either way, so chunks cost no time.
    """
    cache = new_cache(model) if cache is None else cache
    t = ids.shape[1]
    parts = [
        model_call(model, ids[:, s : s + chunk], None, None, cache, hidden=hidden, keep=1)
        for s in range(0, t, max(1, chunk))
    ]
    return cache, joined(parts, hidden)


def joined(parts: Sequence[Any], hidden: bool) -> Any:
    """The output of a prefill run in chunks as one forward gives it: the last chunk's (its last logits),
    with every position's hidden states, layer by layer, when asked."""
    out = parts[-1]
    if hidden and len(parts) > 1:
        out.hidden_states = tuple(
            torch.cat(layer, dim=1) for layer in zip(*(p.hidden_states for p in parts), strict=True)
        )
    return out


class Forward:
    """What one engine forward gives back, per row b (its ``m_b`` block nodes): ``logits[b]`` [m_b, V],
    ``argmax[b]`` the greedy token after every node (one argmax over the whole forward, computed when first
    read), ``hidden[b]`` the last hidden states [m_b, d] (None unless asked), ``fed`` the positions fed
    (padding included) and ``ms`` the wall time of the model call."""

    __slots__ = ("_all", "_argmax", "fed", "hidden", "logits", "ms", "sizes")

    def __init__(
        self,
        all_logits: torch.Tensor,
        sizes: list[int],
        hidden: list[torch.Tensor] | None,
        fed: int,
        ms: float,
    ) -> None:
        self._all, self.sizes, self.hidden, self.fed, self.ms = all_logits, sizes, hidden, fed, ms
        self.logits = [all_logits[r, :n] for r, n in enumerate(sizes)]
        self._argmax: list[list[int]] | None = None

    @property
    def argmax(self) -> list[list[int]]:
        if self._argmax is None:
            # ``max``'s indices: the first maximum, as ``argmax`` gives (documented for both), but torch's CPU
            # argmax over bfloat16 logits is ~4x slower (one SmolLM2 row: 177 against 44 us; eight rows: 717
            # against 177, EPYC); and only the fed positions, not a compiled bucket's padding
            flat = self._all[:, : max(self.sizes)].max(-1).indices.tolist()
            self._argmax = [a[:n] for a, n in zip(flat, self.sizes, strict=True)]
        return self._argmax

    def constrain(self, matchers: Sequence[Any], blocks: Sequence[Block]) -> None:
        """Mask, in place, the logits of every row that has a grammar matcher (None: unconstrained), node by
        node along the block's tree (:meth:`fastforward.core.constraint.Matcher.mask_tree`); the argmax is
        then read from the masked logits. Called before anything reads this forward."""
        for b, m in enumerate(matchers):
            if m is not None:
                m.mask_tree(blocks[b].tokens, list(blocks[b].parents), self.logits[b])
                self._argmax = None


class ModelEngine:
    """The target model with its rows' KV cache: rows side by side, ``[B, k]`` forwards, every row fed as
    wide as the widest block (pad nodes attend only to themselves and are dropped), the cache
    ``[B, H, max_len, D]`` compacted after every step (:func:`compact`). Attention reads only a row's own
    keys; the price is the padding when rows guess different numbers of tokens (``padding_share`` in the
    batch stats). A batch-1 decoder is the case B = 1: :meth:`start` prefills its prompt as the one row."""

    name = "padded"

    def __init__(
        self, model: torch.nn.Module, use_compiled: bool = True, widths: Sequence[int] = BUCKETS
    ) -> None:
        self.model = model
        self.use_compiled = use_compiled  # False: eager even when the model has a compiled forward
        self.widths = tuple(widths)  # the compiled widths this engine runs; others run eagerly on its cache
        self.cache: SlotCache | FixedCache | None = None
        self.lengths: list[int] = []
        self._start = 0
        self._runner: CompiledForward | None = None  # set while this engine decodes through compiled graphs
        self.ran = "eager"  # what ran this engine's forwards: "compiled", or "eager" with why when not

    def reset(self) -> None:
        """Drop every row (and so the KV memory); give the compiled forward's cache back."""
        if self._runner is not None:
            self._runner.release()
        self.cache, self.lengths, self._start, self._runner = None, [], 0, None

    close = reset

    def start(self, ids: torch.Tensor, hidden: bool = False, capacity: int = 0, room: int = 0) -> Any:
        """Batch 1: forget any rows, prefill ``ids`` [1, T] as the only row, straight into a static cache for
        ``capacity`` kept slots (the request's prompt + output) plus ``room`` for a step's guesses (it doubles
        if outgrown); the model output (last position). With a compiled forward (:mod:`fastforward.core.compiled`)
        the row goes into the smallest fixed cache that holds it and the widest bucket instead, when one does
        and nobody else holds the compiled forward; :attr:`ran` says which."""
        self.reset()
        runner = compiled(self.model) if self.use_compiled else None
        if runner is not None:
            need = max(capacity, ids.shape[1]) + BUCKETS[-1]
            if not runner.widths:
                self.ran = "eager (no width's compiled forward fits in memory)"
            elif need > runner.capacity:
                self.ran = f"eager (needs {capacity} cache slots, compiled for {runner.capacity})"
            elif (cache := runner.acquire(need)) is None:
                self.ran = "eager (the compiled forward was busy with another request)"
            else:
                self._runner, self.cache, self.ran = runner, cache, "compiled"
                return self._fixed_prefill(ids, hidden)
        self.cache, out = prefill(self.model, ids, hidden, SlotCache(max(capacity, ids.shape[1]) + room))
        self.lengths = [ids.shape[1]]
        return out

    def borrow(self, cache: SlotCache | FixedCache, length: int) -> bool:
        """Batch 1, drafting on another engine's cache: this engine's one row is the first ``length`` tokens
        of ``cache`` (a layer view of the target's, :func:`fastforward.core.cache.first_layers`) and its
        :meth:`feed` writes there; the caller rolls the length back after drafting (:meth:`truncate`). A
        fixed cache runs through this model's compiled graphs, so it is borrowed only when they can take it
        (False otherwise: nothing changed; the caller drafts on a cache of its own)."""
        if isinstance(cache, FixedCache):
            runner = compiled(self.model) if self.use_compiled else None
            if runner is None:
                return False
            if self._runner is None or self._runner.cache.capacity != cache.capacity:
                self.reset()
                if runner.acquire(cache=cache) is None:
                    return False
                self._runner = runner
            runner.cache, self.ran = cache, "compiled"
        elif self._runner is not None:
            self.reset()
        self.cache, self.lengths = cache, [length]
        return True

    def _fixed_prefill(self, ids: torch.Tensor, hidden: bool, chunk: int = PREFILL_CHUNK, at: int = 0) -> Any:
        """The prompt (or, from slot ``at``, more of it) into the compiled forward's fixed cache, eagerly,
        ``chunk`` tokens per forward (as :func:`prefill`)."""
        assert self._runner is not None and isinstance(self.cache, FixedCache)
        param = next(self.model.parameters())
        parts = []
        for s in range(at, at + ids.shape[1], max(1, chunk)):
            part = ids[:, s - at : s - at + chunk]
            t = part.shape[1]
            _, pos, mask = block_inputs(
                self.model,
                [s],
                [Block.chain(part[0].tolist())],
                s,
                0,
                param.dtype,
                ids.device,
                span=s + t if self._runner.shared_kv_heads else self.cache.capacity,
            )
            self.cache.write_at(s, t, ids.device)
            parts.append(self._runner.prefill(part, pos, mask, hidden))
            self.cache.advance(s + t)
        self.lengths = [at + ids.shape[1]]
        return joined(parts, hidden)

    def add(self, cache: Any, length: int) -> None:
        """Join a prefilled single-row cache holding ``length`` tokens as the last row (one copy of the
        rows into a static cache one row taller; admissions are rare next to steps)."""
        parts = (
            [(cache, length)]
            if self.cache is None
            else [(self.cache, cache_length(self.cache)), (cache, length)]
        )
        self.cache = slot_rows(parts)
        self.lengths.append(length)

    def forward(self, blocks: Sequence[Block], pad_id: int = 0, hidden: bool = False) -> Forward:
        """One forward over every row's block (row b's nodes at positions ``lengths[b] + depth``)."""
        m = self.model
        param = next(m.parameters())
        self._start = cache_length(self.cache)
        k = max(len(b.tokens) for b in blocks)
        if self._runner is not None and self._start + k > self.cache.capacity:
            self._leave_fixed_cache("eager (outgrew the compiled forward's fixed cache mid-request)")
        width = self._width(k)
        if width is not None and self._start + width <= self.cache.capacity:
            return self._fixed_forward(blocks, pad_id, hidden, width, param)
        if (pieces := self._chunk_plan(blocks, k)) is not None:
            return self._chunked_chain(blocks[0], pieces, pad_id, hidden)
        ids, pos, mask = block_inputs(
            m, self.lengths, blocks, self._start, pad_id, param.dtype, param.device,
            span=self.cache.capacity if self._runner is not None else 0,
        )  # fmt: skip
        if self._runner is not None:  # wider than any bucket: the same fixed cache, eagerly
            self.cache.write_at(self._start, ids.shape[1], param.device)
            t0 = time.perf_counter()
            logits, states = self._runner.eager(ids, pos, mask, hidden)
            return self._fixed_result(blocks, logits, states, ids.numel(), t0)
        t0 = time.perf_counter()
        out = model_call(m, ids, pos, mask, self.cache, hidden=hidden)
        ms = (time.perf_counter() - t0) * 1e3
        sizes = [len(b.tokens) for b in blocks]
        states = [out.hidden_states[-1][r, :n] for r, n in enumerate(sizes)] if hidden else None
        return Forward(out.logits, sizes, states, ids.numel(), ms)

    def _chunk_plan(self, blocks: Sequence[Block], k: int) -> list[tuple[int, int]] | None:
        """The pieces (:func:`chain_pieces`) in which a forward that no single compiled graph can take (wider
        than every compiled width, or whose padded width runs past the fixed cache's end) can go through the
        compiled graphs (:meth:`_chunked_chain`), or None: only one row's chain, its cache compacted to its
        committed tokens, with room for the pieces in the fixed cache."""
        if not (
            self._runner is not None
            and len(blocks) == 1
            and blocks[0].parents == chain_parents(k)
            and self.lengths == [self._start]
        ):
            return None
        widths = [w for w in self._runner.widths if w in self.widths]
        return chain_pieces(k, widths, self.cache.capacity - self._start) if widths else None

    def _chunked_chain(
        self, block: Block, pieces: list[tuple[int, int]], pad_id: int, hidden: bool
    ) -> Forward:
        """A chain that no single compiled graph can take (:meth:`_chunk_plan`), fed through the compiled
        graphs in consecutive ``pieces`` ((tokens, width) each), each piece attending to the ones before it
        as to committed tokens: the logits a single forward would give, from the compiled graphs. Why: the
        eager forward past the widest bucket computes differently (other kernels, other reduction orders),
        so a draft longer than the widest bucket (sd's gamma grows to 12) verified eagerly could pick
        another token than the compiled AR step; the 1.5B W8A8 pair with buckets 1, 4 and 8 matched its AR
        on 1 of 3 GSM8K prompts that way (session 54)."""
        start, param = self._start, next(self.model.parameters())
        parts: list[Forward] = []
        try:
            at = 0
            for n, width in pieces:
                self.lengths[0] = self._start = start + at  # the pieces before this one are its context
                piece = [Block.chain(block.tokens[at : at + n])]
                parts.append(self._fixed_forward(piece, pad_id, hidden, width, param))
                at += n
        except BaseException:
            # the pieces that ran are dropped, as a failed single forward's would be
            self.cache.advance(start)
            raise
        finally:
            self.lengths[0], self._start = start, start
        logits = torch.cat([p.logits[0] for p in parts])[None]
        states = [torch.cat([p.hidden[0] for p in parts])] if hidden else None  # type: ignore[index]
        return Forward(
            logits, [len(block.tokens)], states, sum(p.fed for p in parts), sum(p.ms for p in parts)
        )

    def _width(self, k: int) -> int | None:
        """The compiled width a forward over ``k`` tokens pads up to: the narrowest that both this engine
        runs and the compiled forward has graphs for (None: eager, or no compiled forward)."""
        if self._runner is None:
            return None
        return bucket(k, [w for w in self._runner.widths if w in self.widths])

    def _leave_fixed_cache(self, why: str) -> None:
        """Move the rows into a static cache of their own (one copy) and go on eagerly; the compiled forward
        is free for the next request."""
        assert self._runner is not None
        self.cache = slot_rows([(self.cache, max(self.lengths))])
        self._runner.release()
        self._runner, self.ran = None, why

    def _fixed_forward(
        self, blocks: Sequence[Block], pad_id: int, hidden: bool, width: int, param: torch.Tensor
    ) -> Forward:
        """:meth:`forward` through the compiled graph of ``width`` fed tokens (blocks padded to it)."""
        assert self._runner is not None and isinstance(self.cache, FixedCache)
        ids, pos, mask = block_inputs(
            self.model, self.lengths, blocks, self._start, pad_id, param.dtype, param.device,
            width=width, span=self.cache.capacity,
        )  # fmt: skip
        self.cache.write_at(self._start, width, param.device)
        t0 = time.perf_counter()
        logits, states = self._runner(ids, pos, mask, hidden)
        if self._runner.failed is not None:
            self.ran = f"eager (compiling failed: {self._runner.failed})"
        return self._fixed_result(blocks, logits, states, ids.numel(), t0)

    def _fixed_result(
        self, blocks: Sequence[Block], logits: torch.Tensor, states: torch.Tensor | None, fed: int, t0: float
    ) -> Forward:
        ms = (time.perf_counter() - t0) * 1e3
        assert isinstance(self.cache, FixedCache)
        sizes = [len(b.tokens) for b in blocks]
        self.cache.advance(self._start + max(sizes))  # pad entries past the longest block are stale
        rows = [states[r, :n] for r, n in enumerate(sizes)] if states is not None else None
        return Forward(logits, sizes, rows, fed, ms)

    def feed(self, tokens: Sequence[int], head: bool = True, room: int = DRAFT_ROOM) -> torch.Tensor:
        """Batch 1, drafting: ``tokens`` after row 0's cached ones (a draft model catching up and stepping),
        all kept; what follows the last of them: the next-token logits [V] (only that position goes through
        the LM head), or with ``head=False`` the decoder's last hidden state [d], for a draft that scores a
        reduced vocabulary with its own head. The first call opens the row on an empty cache.

        A draft with compiled forwards (:func:`compile_draft`) opens its row in the
        smallest fixed cache with ``room`` slots to spare (the tokens its request may still commit, so the
        draft's cache is the size of its target's) and steps through its compiled graphs:
        a feed of up to :data:`DRAFT_SPLIT` tokens goes one token per forward through the 1-token graph (a
        draft compiles only the widths this engine was given), a longer catch-up in one eager forward on the
        same cache; a row that outgrows the cache goes on eagerly (:attr:`ran` says so)."""
        dev = next(self.model.parameters()).device
        ids = torch.tensor([list(tokens)], dtype=torch.long, device=dev)
        if self.cache is None:
            if head and self.use_compiled and compiled(self.model) is not None:
                return self.start(ids, capacity=ids.shape[1] + room).logits[0, -1]
            self.cache, self.lengths = SlotCache(), [0]
        n, k = self.lengths[0], len(tokens)
        if self._runner is not None and n + k + 1 > self.cache.capacity:
            self._leave_fixed_cache("eager (outgrew the compiled forward's fixed cache mid-request)")
        if self._runner is not None:
            return self._fixed_feed(ids)
        pos = torch.arange(n, n + k, device=dev)[None]
        res = model_call(self.model, ids, pos, None, self.cache, keep=1, head=head)
        out = res.logits[0, -1] if head else res.last_hidden_state[0, -1]
        self.lengths[0] = n + k
        return out

    def _fixed_feed(self, ids: torch.Tensor) -> torch.Tensor:
        """:meth:`feed` on the compiled forward's fixed cache: the next-token logits after ``ids`` [1, k]."""
        k = ids.shape[1]
        if self._width(k) is not None:
            out = self.forward([Block.chain(ids[0].tolist())])
            self.keep([list(range(k))])
            return out.logits[0][k - 1]
        if k <= DRAFT_SPLIT and self._width(1) == 1:
            for t in ids[0].tolist():
                out = self.forward([Block.chain([t])])
                self.keep([[0]])
            return out.logits[0][0]
        return self._fixed_prefill(ids, hidden=False, at=self.lengths[0]).logits[0, -1]

    def keep(self, paths: Sequence[Sequence[int]]) -> None:
        """After :meth:`forward`: row b keeps the nodes ``paths[b]`` (ascending, node 0 first) of its block,
        contiguous after its prefix; everything else that forward appended is dropped."""
        self.lengths = compact(self.cache, self._start, self.lengths, paths)

    def truncate(self, row: int, length: int) -> None:
        """Row ``row`` keeps at most its first ``length`` cached tokens: rollback is a length (the slots past
        it are stale, hidden by every mask and overwritten by the next forward's compaction)."""
        self.lengths[row] = min(self.lengths[row], length)
        if self.cache is not None:
            rollback(self.cache, max(self.lengths))  # a length change on the static cache; exact for batch 1

    def retain(self, keep: Sequence[int]) -> None:
        """Keep only rows ``keep``, in that order."""
        self.lengths = [self.lengths[i] for i in keep]
        if keep:
            select(self.cache, keep, self.lengths)
        else:
            self.cache = None


def chain_pieces(k: int, widths: Sequence[int], room: int) -> list[tuple[int, int]] | None:
    """How a chain of ``k`` tokens goes through graphs of ``widths`` fed tokens in consecutive pieces, as
    (tokens, width) pairs, within ``room`` cache slots: pieces of the widest width, then the rest padded up
    to its bucket, or, where that padding would run past ``room``, cut into pieces that fill a width
    exactly. None when ``k`` does not fit in ``room`` or the rest has no such cut."""
    if k > room:
        return None
    widest, pieces, at = max(widths), [], 0
    while at < k:
        n = min(k - at, widest)
        width = bucket(n, widths)
        assert width is not None  # n <= widest
        if at + width > room:  # the padded piece would write past the cache: the widest it fills
            width = max((w for w in widths if w <= n), default=0)
            if width == 0:
                return None
            n = width
        pieces.append((n, width))
        at += n
    return pieces


def stored_widths(model: torch.nn.Module, hidden: bool = False) -> tuple[int, ...]:
    """The widths whose package for the smallest fixed cache is already on disk for ``model`` (its compiled
    forward's store, under its packages' fingerprint); () without a compiled forward or store."""
    from fastforward.core import aot
    from fastforward.core.compiled import tiers

    runner = compiled(model)
    if runner is None or runner.store is None:
        return ()
    folder = runner.store / runner._packages_fingerprint()  # noqa: SLF001 - the key the runner files them under
    size = tiers(runner.capacity)[0]
    return tuple(w for w in runner.widths if (folder / aot.package_name(w, hidden, size)).is_file())


def warm_stored(model: torch.nn.Module, widths: Sequence[int] | None = None) -> float:
    """Load now every package of ``model`` that is already on disk (:func:`stored_widths`; of ``widths``
    only, when given: an AR chat steps through the 1-token graph alone), building none.

    Why: a server loads a package on a bucket's first use, after its start-up, and what loads then keeps the
    kernel's 4 KB pages (:func:`fastforward.core.memory.huge_pages` runs once, at start-up); loaded first, the
    weights of every stored bucket are on 2 MB pages from the first request (+6.5-9.2% per bf16 AR step on the
    EPYC, session 48). Loading six stored SmolLM2 packages takes ~2 s. Returns the seconds spent."""
    found = [w for w in stored_widths(model) if widths is None or w in widths]
    return warm_buckets(model, found) if found else 0.0


def warm_buckets(
    model: torch.nn.Module,
    widths: Sequence[int] = BUCKETS,
    hidden: bool = False,
    sizes: Sequence[int] = (),
) -> float:
    """Compile (or load from inductor's cache) the model's forward for every width in ``widths`` over every
    fixed-cache size in ``sizes`` (default: the smallest) now, so a timed run never pays for a first use; a
    no-op without a compiled forward. Returns the seconds spent."""
    runner = compiled(model)
    if runner is None:
        return 0.0
    t0 = time.perf_counter()
    engine = ModelEngine(model)
    ids = torch.zeros(1, 8, dtype=torch.long, device=next(model.parameters()).device)

    def warm_each() -> None:
        for size in sizes or (0,):
            engine.start(ids, hidden, capacity=max(0, size - BUCKETS[-1]))  # lands in the tier of that size
            try:  # each asked width warms the graph it pads up to (none past the widest compiled width)
                for w in sorted({b for w in widths if (b := bucket(w, runner.widths)) is not None}):
                    engine.forward([Block.chain([0] * w)], hidden=hidden)
                    engine.truncate(0, 8)
            finally:
                engine.close()

    unloads = runner.unloads
    with torch.inference_mode():
        warm_each()
        if runner.unloads != unloads:  # a build dropped loaded packages: load them again (all are on disk)
            warm_each()
    return time.perf_counter() - t0

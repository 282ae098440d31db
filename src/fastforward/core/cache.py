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

The engine's own cache is static (:class:`SlotCache`): every layer is a buffer preallocated for the request
(prompt + output + one step's guesses), a forward writes its new entries in place after the used slots, and
a rollback or crop only moves the used length. transformers' ``DynamicCache`` instead concatenates every
forward's entries, copying each layer's whole cache per step; its own ``StaticCache`` keeps one write
position that cannot be moved back, so it cannot undo a rejected guess. ``DynamicCache`` stays where rows
are padded on the left (CLLM's trajectory collection) and in the packed batch layout.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import torch
from transformers import DynamicCache
from transformers.cache_utils import Cache, CacheLayerMixin

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


class SlotLayer(CacheLayerMixin):
    """One layer's keys and values in a preallocated ``[B, H, capacity, D]`` buffer, of which the first
    ``length`` slots are in use. ``keys``/``values`` are the whole buffers, so slot surgery (:func:`compact`,
    :func:`keep_positions`) indexes them as it does a dynamic layer's; the model is given views of the used
    slots. Growing past the capacity copies once into a buffer twice as long (a request that outgrew its
    estimate), never per step."""

    is_sliding = False
    is_compileable = False  # keeps transformers' "no mask needed" shortcut for one-token steps
    is_croppable = True

    def __init__(self, capacity: int = 0) -> None:
        super().__init__()
        self.capacity = capacity
        self.length = 0

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.dtype, self.device = key_states.dtype, key_states.device
        b, h, q, _ = key_states.shape
        size = max(self.capacity, q)
        self.keys = key_states.new_zeros(b, h, size, key_states.shape[3])
        self.values = value_states.new_zeros(b, h, size, value_states.shape[3])
        self.is_initialized = True

    def reserve(self, slots: int) -> None:
        """Make room for at least ``slots`` slots (doubling), keeping the used ones."""
        size = self.keys.shape[2]
        if slots <= size:
            return
        size = max(slots, 2 * size)
        for attr in ("keys", "values"):
            old = getattr(self, attr)
            new = old.new_zeros(old.shape[0], old.shape[1], size, old.shape[3])
            new[:, :, : self.length] = old[:, :, : self.length]
            setattr(self, attr, new)

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: object, **kwargs: object
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        start, end = self.length, self.length + key_states.shape[2]
        self.reserve(end)
        self.keys[:, :, start:end] = key_states
        self.values[:, :, start:end] = value_states
        self.length = end
        return self.keys[:, :, :end], self.values[:, :, :end]

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.length + query_length, 0

    def get_seq_length(self) -> int:
        return self.length

    def get_max_length(self) -> int:
        return -1

    def crop(self, tokens_to_remove: int) -> None:
        """transformers' convention: a negative count of slots to drop (a length change, nothing is freed)."""
        if tokens_to_remove > 0:
            raise ValueError(f"crop takes a negative count, got {tokens_to_remove}")
        self.length = max(0, self.length + tokens_to_remove)

    def reset(self) -> None:
        self.length = 0

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.is_initialized:
            self.keys, self.values = self.keys[indices], self.values[indices]


class SlotCache(Cache):
    """A cache of :class:`SlotLayer`: in-place writes, rollback by length. ``capacity`` is the slots to
    preallocate per layer on the first forward (the request's prompt + output + widest step); 0 sizes the
    buffers to that first forward and lets them double."""

    def __init__(self, capacity: int = 0) -> None:
        super().__init__(layer_class_to_replicate=functools.partial(SlotLayer, capacity))


class FixedLayer(SlotLayer):
    """One layer's keys and values in a ``[B, H, capacity, D]`` buffer whose shape never changes, for
    compiled forwards (:mod:`fastforward.core.compiled`): :meth:`update` writes the new entries at the slots
    the engine names in ``slots.where`` (a tensor, so the compiled graph does not depend on the length) and
    returns the *whole* buffers; the attention mask hides every slot past a row's length. The used length is
    kept by the engine (:meth:`FixedCache.advance`), never inside the forward, for the same reason. Length,
    crop, reset and row selection are :class:`SlotLayer`'s; it never grows."""

    is_compileable = True

    def __init__(self, capacity: int, slots: FixedSlots) -> None:
        super().__init__(capacity)
        self.slots = slots

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        super().lazy_initialization(key_states[:, :, :0], value_states[:, :, :0])  # exactly capacity slots
        if self.keys.is_cuda:  # CUDA graphs replay over fixed addresses: the buffers must never be copied in
            import torch._dynamo

            torch._dynamo.mark_static_address(self.keys)
            torch._dynamo.mark_static_address(self.values)

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: object, **kwargs: object
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        self.keys.index_copy_(2, self.slots.where, key_states)
        self.values.index_copy_(2, self.slots.where, value_states)
        return self.keys, self.values

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.capacity, 0

    def get_max_length(self) -> int:
        return self.capacity


def first_layers(cache: SlotCache | FixedCache, count: int) -> SlotCache | FixedCache:
    """A cache whose layers ARE the first ``count`` layers of ``cache`` (the same objects, so writes land in
    ``cache``'s buffers; a fixed cache's write positions are shared too). What a layer-skip draft, which is
    the target's own first layers, drafts on: the target's cache already holds its keys and values for every
    committed token, so the draft neither keeps a cache of its own nor catches one up after the target ran
    alone. Its guesses' entries sit past the target's length (the target's next forward overwrites them)
    until the drafter rolls the length back."""
    if isinstance(cache, FixedCache):
        view: SlotCache | FixedCache = FixedCache(cache.capacity)
        view.slots = cache.slots
    else:
        view = SlotCache()
    view.layers = list(cache.layers[:count])
    return view


class FixedSlots:
    """Where the next forward writes: slot indices shared by every :class:`FixedLayer` of one cache."""

    def __init__(self) -> None:
        self.where = torch.zeros(1, dtype=torch.long)


class FixedCache(Cache):
    """A cache of :class:`FixedLayer` with ``capacity`` slots per layer (shapes fixed for a compiled graph):
    writes go where :meth:`write_at` says, the used length moves with :meth:`advance`, rollback by length."""

    def __init__(self, capacity: int) -> None:
        self.slots = FixedSlots()
        self.capacity = capacity
        super().__init__(layer_class_to_replicate=functools.partial(FixedLayer, capacity, self.slots))

    def write_at(self, start: int, count: int, device: torch.device | str) -> None:
        """The next forward's ``count`` entries go to slots ``start .. start + count - 1``."""
        if start + count > self.capacity:
            raise ValueError(f"{start + count} slots do not fit a fixed cache of {self.capacity}")
        self.slots.where = torch.arange(start, start + count, device=device)

    def advance(self, length: int) -> None:
        """After a forward: the first ``length`` slots are in use (pad entries past it are stale)."""
        for layer in self.layers:
            layer.length = length


def slot_rows(caches: Sequence[tuple[Cache, int]]) -> SlotCache:
    """One :class:`SlotCache` holding the rows of every ``(cache, length)`` in order, each up to its
    ``length`` (a prefilled single-row cache, dynamic or static, or the engine's own rows with their longest
    length); slots past a row's length are stale and never seen. Keeps the largest buffer among the parts, so
    joining a row does not shrink the room left for the running ones."""
    parts = [(full_layers(c), n) for c, n in caches]
    rows = sum(int(layers[0].keys.shape[0]) for layers, _ in parts)
    longest = max(n for _, n in parts)
    size = max(longest, *(int(layers[0].keys.shape[2]) for layers, _ in parts))
    out = SlotCache(size)
    for i, template in enumerate(parts[0][0]):
        layer = SlotLayer(size)
        k0, v0 = template.keys, template.values
        layer.dtype, layer.device, layer.is_initialized = k0.dtype, k0.device, True
        layer.keys = k0.new_zeros(rows, k0.shape[1], size, k0.shape[3])
        layer.values = v0.new_zeros(rows, v0.shape[1], size, v0.shape[3])
        r = 0
        for layers, n in parts:
            src = layers[i]
            b = int(src.keys.shape[0])
            layer.keys[r : r + b, :, :n] = src.keys[:, :, :n]
            layer.values[r : r + b, :, :n] = src.values[:, :, :n]
            r += b
        layer.length = longest
        out.layers.append(layer)
    return out


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

"""The one call of a model's forward over a KV cache: :func:`model_call`.

Why a module of its own: this is the code a compiled forward traces (:mod:`fastforward.core.compiled`
wraps it; :mod:`fastforward.core.aot` packages it), so its source is part of every package's fingerprint
(:data:`fastforward.core.aot.TRACED`). Kept apart from the engine, a change to the engine's Python around
the forward (inputs, masks, acceptance, bookkeeping) leaves the compiled packages valid instead of
rebuilding every width bucket of every model.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.cache_utils import Cache

from fastforward.core.masks import Mask


def model_call(
    model: torch.nn.Module,
    ids: torch.Tensor,
    pos: torch.Tensor | None,
    mask: Mask | None,
    cache: Cache,
    hidden: bool = False,
    keep: int = 0,
    head: bool = True,
) -> Any:
    """The one call of a model's forward over a KV cache in the package (eager, or traced into a compiled
    graph; the engine's steps, prefills, the draft models, the packed layout, CLLM's trajectory collection and
    the cost probe all come here): ``ids`` [B, k] at ``pos`` (None: after the cache) with ``mask`` (None:
    the model's causal mask) over ``cache``; ``keep``: logits of only the last that many positions (0: all);
    ``hidden``: the hidden states too; ``head=False``: the decoder stack only (``get_decoder()``, its
    ``last_hidden_state``), for a draft that scores a reduced vocabulary with a head of its own."""
    if not head:
        model = model.get_decoder()
        return model(
            input_ids=ids, position_ids=pos, attention_mask=mask, past_key_values=cache, use_cache=True
        )
    return model(
        input_ids=ids, position_ids=pos, attention_mask=mask, past_key_values=cache, use_cache=True,
        logits_to_keep=kept_positions(ids, keep), output_hidden_states=hidden,
    )  # fmt: skip


def kept_positions(ids: torch.Tensor, keep: int) -> int | torch.Tensor:
    """``logits_to_keep`` for the last ``keep`` of the positions ``ids`` feeds: their indices, so the model
    gathers those hidden states into a tensor of its own (0, all of them, stays 0).

    Why not the count: with it, transformers slices ``hidden[:, -keep:, :]``, a view whose batch stride is the
    whole prompt's, and for such a 3D input torch's CPU ``linear`` does not fold the batch into one matmul: it
    copies the LM head's weight for a batched one. For SmolLM2 (a 49152 x 576 head) that copy was ~45 of the
    ~210 ms of a 150-token bfloat16 prefill on a 2-core EPYC; the head on a gathered row costs ~4 ms."""
    t = ids.shape[1]
    if keep <= 0 or keep >= t:
        return keep
    return torch.arange(t - keep, t, device=ids.device)

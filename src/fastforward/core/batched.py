"""Batched greedy generation for offline work (quality evaluation, distillation data), not for latency.

transformers' batched ``generate()`` over left-padded static batches: offline jobs only need the greedy
*tokens*, and a left-padded batch gives the same tokens for a fraction of the CPU time (equality with batch-1
AR in fp32 is tested in tests/test_quality.py). It is also the peer that ``bench --batch-size`` measures our
continuous batching (:mod:`fastforward.core.batching`) against.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from fastforward.core.decoder import model_context_length
from fastforward.errors import FastForwardError


def cut_at_eos(tokens: Sequence[int], eos_ids: Sequence[int], max_new_tokens: int) -> list[int]:
    """The tokens batch-1 AR would have committed: up to and including the first EOS, at most the cap."""
    out: list[int] = []
    for t in list(tokens)[:max_new_tokens]:
        out.append(int(t))
        if t in eos_ids:
            break
    return out


def batched_greedy(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    eos_ids: Sequence[int],
    batch_size: int = 16,
    progress: Callable[[int, int], None] | None = None,
) -> list[list[int]]:
    """Greedy answers of ``model`` to every prompt (input order kept), decoded in left-padded batches.

    Prompts are sorted by length first so that a batch holds similar lengths (less padding, fewer wasted
    positions). Rows that finished keep being padded by ``generate`` and are cut at their first EOS.
    """
    if batch_size < 1:
        raise FastForwardError(f"batch size must be >= 1, got {batch_size}")
    if not eos_ids:
        raise FastForwardError("the model has no EOS token id; cannot tell where an answer ends")
    longest = max((len(p) for p in prompts), default=0)
    if min((len(p) for p in prompts), default=1) == 0:
        raise FastForwardError("a prompt is empty")
    context = model_context_length(model)
    if longest + max_new_tokens > context:
        raise FastForwardError(
            f"prompt ({longest} tokens) + max_new_tokens ({max_new_tokens}) exceeds the model's context length "
            f"({context})"
        )
    device = next(model.parameters()).device
    pad = int(eos_ids[0])
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    outputs: list[list[int] | None] = [None] * len(prompts)
    done = 0
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        width = max(len(prompts[i]) for i in idx)
        ids = torch.full((len(idx), width), pad, dtype=torch.long)
        mask = torch.zeros((len(idx), width), dtype=torch.long)
        for row, i in enumerate(idx):
            p = list(prompts[i])
            ids[row, width - len(p) :] = torch.tensor(p)
            mask[row, width - len(p) :] = 1
        with torch.inference_mode():
            gen = model.generate(
                input_ids=ids.to(device),
                attention_mask=mask.to(device),
                max_new_tokens=max_new_tokens,
                do_sample=False,
                num_beams=1,
                eos_token_id=list(eos_ids),
                pad_token_id=pad,
                temperature=None,
                top_p=None,
                top_k=None,
            )
        for row, i in enumerate(idx):
            outputs[i] = cut_at_eos(gen[row, width:].tolist(), eos_ids, max_new_tokens)
        done += len(idx)
        if progress:
            progress(done, len(prompts))
    return [o if o is not None else [] for o in outputs]

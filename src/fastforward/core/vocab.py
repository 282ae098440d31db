"""Reduced-vocabulary draft heads: draft over the K most frequent tokens, verify over the whole vocabulary.

Why: a draft's LM head reads ``vocab x hidden`` weights for every drafted token. For SmolLM2 (49k x 576) that
is a quarter of the model; for Qwen2.5 (152k x 1536) it is 233M parameters, more than a 0.5B draft's layers
spend per token. Natural text uses few of those ids: FR-Spec and EAGLE-3 rank tokens by frequency on a corpus
and give the draft only the top K. The target still scores every id, so a draft token outside the subset is
never proposed, which costs acceptance, never correctness: greedy verification compares with the target's
own argmax, and rejection sampling stays exact because the draft's distribution is reported over the full
vocabulary with zeros outside the subset (the residual ``max(0, p - q)`` then keeps all of the target's
mass there: :meth:`VocabSubset.expand`).

Pieces, small and pure where they can be:

- :func:`count_ids` / :func:`rank_subset`: token counts -> the top-K ids (ties by id; EOS always kept).
- :mod:`fastforward.data.vocab_corpus` (a layer up: it reads datasets): the counting corpus and
  ``subset_for``, counts cached per tokenizer or read from a draft's ``vocab_counts.pt``.
- :class:`RestrictedHead`: the draft's ``[K, hidden]`` head built from a full head's rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from fastforward.errors import FastForwardError

COUNTS_FILE = "vocab_counts.pt"  # saved beside a draft (e.g. a Chimera heads directory) to pin its ranking


@dataclass(frozen=True)
class VocabSubset:
    """The ids a draft may propose (ascending) out of a vocabulary of ``vocab_size``."""

    ids: torch.Tensor  # [K] long, ascending, unique
    vocab_size: int

    @property
    def size(self) -> int:
        return int(self.ids.numel())

    def to_full(self, sub_index: torch.Tensor) -> torch.Tensor:
        """Positions in the subset -> token ids."""
        return self.ids.to(sub_index.device)[sub_index]

    def expand(self, sub_probs: torch.Tensor) -> torch.Tensor:
        """Distributions over the subset [..., K] -> over the vocabulary [..., V], zero outside the subset."""
        full = sub_probs.new_zeros(*sub_probs.shape[:-1], self.vocab_size)
        return full.index_copy_(-1, self.ids.to(sub_probs.device), sub_probs)


def count_ids(token_lists: Iterable[Sequence[int]], vocab_size: int) -> torch.Tensor:
    """How often each id occurs: [vocab_size] int64 (ids >= vocab_size are ignored)."""
    counts = torch.zeros(vocab_size, dtype=torch.long)
    for ids in token_lists:
        t = torch.as_tensor(list(ids), dtype=torch.long)
        t = t[(t >= 0) & (t < vocab_size)]
        counts += torch.bincount(t, minlength=vocab_size)
    return counts


def rank_subset(counts: torch.Tensor, size: int, always: Sequence[int] = ()) -> VocabSubset:
    """The ``size`` most frequent ids (ties broken by the smaller id), always including ``always`` (EOS and
    the like: a draft that cannot end a turn drafts past every ending). ``size`` counts the forced ids."""
    vocab = int(counts.numel())
    if size < 1:
        raise FastForwardError(f"vocab subset size must be >= 1, got {size}")
    forced = sorted({int(i) for i in always if 0 <= int(i) < vocab})
    if size < len(forced):
        raise FastForwardError(f"vocab subset size {size} is smaller than the {len(forced)} ids it must keep")
    # stable descending sort by count: equal counts keep ascending id order
    order = torch.sort(counts, descending=True, stable=True).indices
    keep = set(forced)
    for i in order.tolist():
        if len(keep) >= size:
            break
        keep.add(i)
    return VocabSubset(torch.tensor(sorted(keep), dtype=torch.long), vocab)


def head_weight(model: nn.Module) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The float weight [V, hidden] and bias of ``model``'s LM head, wherever the loaded kernel path keeps it.

    A head replaced by a kernel module keeps ``.weight`` when it is tied to the embeddings; otherwise the
    input embeddings serve when the config ties them. An untied head whose float weights were released
    (a prepacked path) cannot be restricted: one-line error."""
    head = model.get_output_embeddings()
    weight = getattr(head, "weight", None)
    if isinstance(weight, torch.Tensor) and weight.is_floating_point():
        return weight, getattr(head, "bias", None)
    cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    if getattr(cfg, "tie_word_embeddings", False):
        return model.get_input_embeddings().weight, None
    raise FastForwardError(
        f"a reduced draft vocabulary needs the float LM head of {type(model).__name__}, which this kernel "
        "path released; use --path default"
    )


class RestrictedHead(nn.Module):
    """The rows of an LM head for a :class:`VocabSubset`: hidden [..., d] -> logits over the subset [..., K].

    The rows are copied (K x d, small next to the full head), so the head can then be quantized or prepacked
    like any other Linear (``linear`` is an ordinary module)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, subset: VocabSubset) -> None:
        super().__init__()
        if weight.shape[0] != subset.vocab_size:
            raise FastForwardError(
                f"LM head has {weight.shape[0]} rows but the vocab subset is for {subset.vocab_size} ids"
            )
        self.subset = subset
        ids = subset.ids.to(weight.device)
        self.linear = nn.Linear(weight.shape[1], subset.size, bias=bias is not None, device="meta")
        self.linear.weight = nn.Parameter(weight.detach().index_select(0, ids).clone(), requires_grad=False)
        if bias is not None:
            self.linear.bias = nn.Parameter(bias.detach().index_select(0, ids).clone(), requires_grad=False)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        w = getattr(self.linear, "weight", None)
        if isinstance(w, torch.Tensor) and w.dtype != hidden.dtype:  # a float32 head on a bf16 model
            hidden = hidden.to(w.dtype)
        return self.linear(hidden)

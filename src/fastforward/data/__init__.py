"""Datasets as :class:`Sample` streams: gsm8k (train/held-out split), humaneval, mtbench, sharegpt, user JSONL."""

from __future__ import annotations

from itertools import islice

from fastforward.data import gsm8k, humaneval, jsonl, mtbench, sharegpt
from fastforward.data.base import Sample, render_prompt
from fastforward.errors import FastForwardError

DATASETS = ("gsm8k", "humaneval", "mtbench", "sharegpt")

__all__ = ["DATASETS", "Sample", "load_dataset", "render_prompt"]


def load_dataset(
    name: str, limit: int | None = None, split: str = "heldout", data_path: str | None = None
) -> list[Sample]:
    """Samples of one dataset (``split`` applies to gsm8k; ``data_path`` overrides ``name`` with a JSONL)."""
    if data_path:
        it = jsonl.load(data_path)
    elif name == "gsm8k":
        it = gsm8k.load(split)
    elif name == "humaneval":
        it = humaneval.load()
    elif name == "mtbench":
        it = mtbench.load()
    elif name == "sharegpt":
        it = sharegpt.load()
    else:
        raise FastForwardError(
            f"unknown dataset '{name}'; choose one of {', '.join(DATASETS)} or pass --data-path"
        )
    if limit is not None and limit < 1:
        raise FastForwardError(f"--limit must be >= 1, got {limit}")
    return list(islice(it, limit))

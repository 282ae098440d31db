"""Add quality to a bench JSON: GSM8K accuracy and HumanEval pass@1 per method, and each relative to AR.

Reads ``methods[NAME].per_sample[i]`` (``id`` is ``gsm8k-<index>`` or ``HumanEval/<n>``, ``text`` the
decoded output), marks each sample ``correct`` and writes ``methods[NAME].quality``:
``{"gsm8k": {"correct", "n", "accuracy", "relative_to_ar"}, "humaneval": {..., "pass_at_1", ...}}``.
Samples of other datasets (MT-bench, ShareGPT) are left unscored. Only turn 0 is scored.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from fastforward.data import gsm8k, humaneval
from fastforward.errors import FastForwardError, read_user_text
from fastforward.eval.humaneval import check_completion

BASELINE = "ar"


def _references(ids: set[str]) -> dict[str, dict]:
    refs: dict[str, dict] = {}
    if any(i.startswith("gsm8k-") for i in ids):
        refs.update({s.id: {"gold": s.answer} for s in gsm8k.load("all") if s.id in ids})
    if any(i.startswith("HumanEval/") for i in ids):
        refs.update({s.id: dict(s.meta) for s in humaneval.load() if s.id in ids})
    return refs


def score_sample(sample_id: str, text: str, ref: dict, timeout_s: float) -> tuple[str, bool] | None:
    """(dataset, correct) for one output, or None when the dataset has no automatic score."""
    if sample_id.startswith("gsm8k-"):
        return "gsm8k", gsm8k.is_correct(text, ref["gold"])
    if sample_id.startswith("HumanEval/"):
        return "humaneval", check_completion(ref, text, timeout_s).passed
    return None


def score_result(result: dict[str, Any], timeout_s: float = 10.0) -> dict[str, Any]:
    """Score every method in place and return ``{method: quality}``."""
    methods = result.get("methods")
    if not isinstance(methods, dict) or not methods:
        raise FastForwardError("not a bench result: no 'methods'")
    ids = {s["id"] for m in methods.values() for s in m.get("per_sample", [])}
    refs = _references(ids)
    for m in methods.values():
        tally: dict[str, list[int]] = {}
        for s in m.get("per_sample", []):
            if s.get("turn", 0) != 0 or s["id"] not in refs:
                continue
            scored = score_sample(s["id"], s.get("text", ""), refs[s["id"]], timeout_s)
            if scored is None:
                continue
            name, ok = scored
            s["correct"] = ok
            t = tally.setdefault(name, [0, 0])
            t[0] += int(ok)
            t[1] += 1
        metric = {"gsm8k": "accuracy", "humaneval": "pass_at_1"}
        m["quality"] = {k: {"correct": c, "n": n, metric[k]: c / n} for k, (c, n) in tally.items()}
    base = methods.get(BASELINE, {}).get("quality", {})
    for m in methods.values():
        for k, q in m["quality"].items():
            key = "accuracy" if k == "gsm8k" else "pass_at_1"
            ref = base.get(k, {}).get(key)
            q["relative_to_ar"] = q[key] / ref if ref else None
    return {n: m["quality"] for n, m in methods.items()}


SCORED = {"gsm8k": "accuracy (final number vs the gold answer)", "humaneval": "pass@1 (tests in a sandbox)"}
UNSCORED = {
    "mtbench": "open-ended questions: MT-bench grades answers with an LLM judge, which fastforward does not run",
    "sharegpt": "open-ended conversations without reference answers",
}


def _dataset_of(sample_id: str) -> str:
    """The dataset of a sample id, for result files written before records named their dataset."""
    for prefix, ds in (
        ("gsm8k-", "gsm8k"),
        ("HumanEval/", "humaneval"),
        ("mtbench-", "mtbench"),
        ("sharegpt-", "sharegpt"),
    ):
        if sample_id.startswith(prefix):
            return ds
    return "unknown"


def explain(result: dict[str, Any]) -> dict[str, str]:
    """For each dataset in a bench result: what ``score`` measures on it, or why it cannot score it."""
    counts: dict[str, int] = {}
    for m in result.get("methods", {}).values():
        for s in m.get("per_sample", []):
            ds = s.get("dataset") or _dataset_of(str(s.get("id", "")))
            counts[ds] = counts.get(ds, 0) + 1
        break  # every method has the same samples
    out = {}
    for ds, n in counts.items():
        if ds in SCORED:
            out[ds] = f"{n} generations; scored: {SCORED[ds]}, first turns only"
        else:
            why = UNSCORED.get(
                ds, "user data (--data-path): no automatic score; the answers are in per_sample[].text"
            )
            out[ds] = f"{n} generations; not scored: {why}"
    return out


def score_file(path: str | Path, timeout_s: float = 10.0) -> dict[str, Any]:
    """Score a bench JSON and add the scores to it in place (only when something could be scored)."""
    p = Path(path)
    try:
        result = json.loads(read_user_text(p, "bench result"))
    except (OSError, json.JSONDecodeError) as e:
        raise FastForwardError(f"cannot read bench result {p}: {e}") from None
    if not isinstance(result, dict):
        raise FastForwardError(
            f"{p} is not a bench result (a JSON object written by fastforward bench --out)"
        )
    quality = score_result(result, timeout_s)
    if any(quality.values()):
        tmp = p.with_name(f".{p.name}.tmp")
        tmp.write_text(json.dumps(result, indent=2) + "\n")
        os.replace(tmp, p)
    return quality

"""chimera-report: per-dataset figures recomputed from per-sample bench records; bad inputs are clear errors."""

from __future__ import annotations

import json

import pytest

from fastforward.bench.chimera_report import per_dataset, summarize
from fastforward.errors import FastForwardError


def _sample(sid: str, new: int, fwd: int, wall: float, same: bool | None) -> dict:
    return {
        "id": sid,
        "turn": 0,
        "new_tokens": new,
        "target_forwards": fwd,
        "wall_time_s": wall,
        "identical_to_ar": same,
    }


def test_per_dataset_splits_by_sample_id():
    ar = {"per_sample": [_sample("mtbench-81", 100, 100, 10.0, True), _sample("gsm8k-3", 50, 50, 5.0, True)]}
    ch = {"per_sample": [_sample("mtbench-81", 100, 50, 5.0, True), _sample("gsm8k-3", 50, 10, 10.0, False)]}
    ch["per_sample"][0]["dataset"] = "mtbench"  # newer records name their dataset; older ones: the id prefix
    got = per_dataset(ch, ar)
    assert got["mtbench"] == {
        "generations": 1, "mean_accepted_tokens": 2.0, "identical_to_ar": 1.0, "tokens_per_s": 20.0,
        "speedup_vs_ar": 2.0,
    }  # fmt: skip
    assert got["gsm8k"]["mean_accepted_tokens"] == 5.0 and got["gsm8k"]["speedup_vs_ar"] == 0.5
    assert got["gsm8k"]["identical_to_ar"] == 0.0


def test_summarize_reads_heads_and_benches(tmp_path):
    heads = tmp_path / "h.json"
    heads.write_text(
        json.dumps({"head_topk": [[0.5, 0.6]], "positions": [10], "draft": {"variant": "medusa"}})
    )
    entry = {
        "mean_accepted_tokens": 2.0, "identical_to_ar": 1.0, "speedup_vs_ar": 1.5, "tokens_per_s": 30.0,
        "extras": {"trigram_cache_hits": 3, "trigram_cache_lookups": 4, "head_accepted": [5, 1]},
        "per_sample": [_sample("gsm8k-1", 10, 5, 1.0, True)],
    }  # fmt: skip
    bench = tmp_path / "b.json"
    bench.write_text(
        json.dumps(
            {
                "dtype": "bfloat16",
                "config": {"opt": ["chimera:m.heads=runs/m"]},
                "methods": {"ar": {**entry, "extras": {}}, "chimera:m": entry, "pld": entry},
            }
        )
    )
    rep = summarize([heads], [bench])
    assert rep["heads"]["medusa"]["head_topk"] == [[0.5, 0.6]]
    rows = rep["bench"]["bfloat16"]["methods"]
    assert set(rows) == {"ar", "chimera:m"}  # other methods are not part of a Chimera report
    assert rows["chimera:m"]["trigram_cache_hit_rate"] == 0.75
    assert rows["chimera:m"]["options"] == {"heads": "runs/m"}
    with pytest.raises(FastForwardError, match="head_topk"):
        summarize([bench], [])
    with pytest.raises(FastForwardError, match="not found"):
        summarize([tmp_path / "missing.json"], [])

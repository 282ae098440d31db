"""results/training_free.json is built from bench files: the issue's keys exactly, fp32-only exactness."""

from __future__ import annotations

from fastforward.bench.training_free import table

KEYS = {"model", "dtype", "engine", "method", "dataset", "tokens_per_forward", "speedup_vs_ar",
        "identical_to_ar_fp32", "isa"}  # fmt: skip


def _bench(dtype: str) -> dict:
    method = {"tokens_per_s": 10.0, "speedup_vs_ar": 1.0, "identical_to_ar": 1.0, "new_tokens": 90,
              "target_forwards": 60, "samples": 3, "ar_step_share": 0.5}  # fmt: skip
    return {"model": "smollm2-135m", "dtype": dtype, "dataset": "gsm8k", "isa": "AVX2", "revision": "abc",
            "command": "fastforward bench ...", "methods": {"ar": dict(method), "recycle": dict(method)}}  # fmt: skip


def test_records_have_exactly_the_issue_keys_and_exactness_only_in_fp32() -> None:
    out = table([_bench("float32"), _bench("bfloat16")])
    assert all(set(r) == KEYS for r in out["records"])
    assert [r["identical_to_ar_fp32"] for r in out["records"]] == [1.0, 1.0, None, None]
    assert out["records"][1]["tokens_per_forward"] == 1.5 and out["records"][1]["engine"] == "eager"
    assert {d["revision"] for d in out["details"]} == {"abc"} and len(out["details"]) == 4

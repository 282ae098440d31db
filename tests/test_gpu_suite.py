"""The GPU suite's CPU dry run (issue 18): every step of recipes/gpu_suite.sh runs with tiny sizes on
SmolLM2-135M, writes its file in the contract the CPU results use, marks itself done, and a rerun skips
finished steps."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SUITE = Path(__file__).resolve().parents[1] / "recipes" / "gpu_suite.sh"


def _suite(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "DRY": "1",
        "OUT": str(tmp_path / "out"),
        "RUNS": str(tmp_path / "runs"),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2"),
    }
    return subprocess.run(["bash", str(SUITE), *args], capture_output=True, text=True, env=env, timeout=1200)


@pytest.mark.slow  # ~2.5 min on a 2-core AVX2 CPU: `make bench-slow` runs it, as before a GPU session
def test_gpu_suite_dry_run_writes_every_result_and_resumes(tmp_path):
    steps = _suite(tmp_path, "--list").stdout.split()
    assert steps[0] == "bench-small" and "cllm-train" in steps and "chimera-bench" in steps
    done = _suite(tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    out = tmp_path / "out"
    assert sorted(p.name for p in (out / ".done").iterdir()) == sorted(steps)
    for name in ("smollm2", "qwen05", "qwen15_sd", "chimera"):
        bench = json.loads((out / f"bench_{name}.json").read_text())
        assert bench["hardware"] and "ar" in bench["methods"] and len(bench["methods"]) >= 3
    assert "chimera" in json.loads((out / "bench_chimera.json").read_text())["methods"]
    cllm = json.loads((out / "cllm_gsm8k.json").read_text())
    assert cllm["hardware"] and cllm["train_tokens"] > 0
    heads = json.loads((out / "chimera_heads.json").read_text())
    assert len(heads["head_topk"]) >= 1 and heads["identical_to_ar"] is not None
    again = _suite(tmp_path)
    assert again.returncode == 0 and again.stderr.count(" done") == len(steps)
    bad = _suite(tmp_path, "no-such-step")
    assert bad.returncode == 2 and "unknown step" in bad.stderr

"""Batched Jacobi collection: exact fixed points, batch-invariant records, resume after SIGKILL or a crash."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from fastforward.cllm.collect import (
    BatchedJacobiCollector,
    CollectConfig,
    PromptJob,
    collect_trajectories,
    converged_length,
    init_state,
)
from fastforward.cllm.trajectories import TrajectoryWriter, group_by_prompt, read_records
from fastforward.core.decoder import GenerationConfig
from fastforward.core.masks import padded_block_mask
from fastforward.decoders.ar import ARDecoder

from .conftest import make_tiny

EOS = 63
CFG = CollectConfig(block_size=4, max_new_tokens=14, batch_size=3, seed=5)


def jobs(n: int = 7) -> list[PromptJob]:
    return [PromptJob(f"p{i}", [1 + i, 5, 7 + i, 9, 11][: 2 + i % 4] * (1 + i % 2)) for i in range(n)]


@pytest.fixture(scope="module")
def tiny64():
    return make_tiny(vocab=64, seed=3)


def _records(path: Path) -> dict:
    return {r.key: r.to_json() for r in read_records(path)}


def test_converged_length_and_init_state():
    assert converged_length([1, 2, 3], [1, 2, 3], 3, ()) == 3
    assert converged_length([1, 2, 3], [1, 2, 4], 3, ()) == 0
    assert converged_length([1, 2, 3], [1, 2, 4], 2, ()) == 2  # length cap inside the block
    assert converged_length([1, 9, 3], [1, 9, 4], 3, (9,)) == 2  # a fixed EOS ends the block
    a = init_state([4, 5, 6], 8, 0, "p", 1)
    assert a == init_state([4, 5, 6], 8, 0, "p", 1) and set(a) <= {4, 5, 6}
    assert a != init_state([4, 5, 6], 8, 0, "p", 2)


def test_block_mask_hides_padding_and_is_causal_in_the_block():
    m = padded_block_mask(make_tiny().model, [2, 0], cache_len=3, n=2, dtype=torch.float32, device="cpu")
    allowed = m == 0
    assert allowed.shape == (2, 1, 2, 5)
    assert allowed[0, 0].tolist() == [[False, False, True, True, False], [False, False, True, True, True]]
    assert allowed[1, 0, 0].tolist() == [True, True, True, True, False]


def test_fixed_points_equal_greedy_ar_and_trajectories_are_jacobi(tiny64, tmp_path):
    p = tmp_path / "t.jsonl"
    collect_trajectories(tiny64.model, [EOS], jobs(), str(p), CFG, progress=False)
    ar = ARDecoder(tiny64.model)
    groups = group_by_prompt(read_records(p))
    assert len(groups) == 7
    for job in jobs():
        recs = groups[job.prompt_id]
        assert [r.block_index for r in recs] == list(range(len(recs)))
        answer = recs[-1].teacher_output_ids[len(job.prompt_ids) :]
        assert answer == ar.generate(job.prompt_ids, GenerationConfig(14, (EOS,))).tokens
        for r in recs:
            assert r.prompt_ids[: r.prompt_len] == job.prompt_ids
            # each state after y(0) has its first token right (the greedy token after the prefix)
            assert all(s[0] == r.fixed_point[0] for s in r.trajectory[1:])
            assert r.trajectory[-2:] != [r.fixed_point, r.fixed_point]  # no duplicated final state
            assert len(r.trajectory) <= len(r.fixed_point) + 1


def test_batched_collection_equals_one_prompt_at_a_time(tiny64, tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    collect_trajectories(tiny64.model, [EOS], jobs(), str(a), CFG, progress=False)
    one = CollectConfig(CFG.block_size, CFG.max_new_tokens, 1, CFG.seed)
    collect_trajectories(tiny64.model, [EOS], jobs(), str(b), one, progress=False)
    assert _records(a) == _records(b)


class _Crash(TrajectoryWriter):
    def __init__(self, path, after):
        super().__init__(path)
        self.after = after

    def write(self, rec):
        if self.after == 0:
            raise RuntimeError("injected crash")
        self.after -= 1
        super().write(rec)


def test_resume_after_a_crash_has_no_missing_or_duplicate_records(tiny64, tmp_path):
    ref, p = tmp_path / "ref.jsonl", tmp_path / "t.jsonl"
    collect_trajectories(tiny64.model, [EOS], jobs(), str(ref), CFG, progress=False)
    with _Crash(p, after=5) as w, pytest.raises(RuntimeError):
        BatchedJacobiCollector(tiny64.model, [EOS], CFG).run(jobs(), w)
    assert len(read_records(p)) == 5
    stats = collect_trajectories(tiny64.model, [EOS], jobs(), str(p), CFG, progress=False)
    keys = [r.key for r in read_records(p)]
    assert len(keys) == len(set(keys))
    assert _records(p) == _records(ref)
    assert stats.records == len(keys) - 5
    again = collect_trajectories(tiny64.model, [EOS], jobs(), str(p), CFG, progress=False)
    assert again.records == 0 and again.prompts_skipped == 7


SCRIPT = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, {root!r})
    from tests.conftest import make_tiny
    from tests.test_cllm_collect import CFG, EOS, jobs
    from fastforward.cllm.collect import BatchedJacobiCollector
    from fastforward.cllm.trajectories import TrajectoryWriter

    class Slow(TrajectoryWriter):
        def write(self, rec):
            super().write(rec)
            time.sleep(0.2)

    with Slow({path!r}) as w:
        BatchedJacobiCollector(make_tiny(vocab=64, seed=3).model, [EOS], CFG).run(jobs(), w)
    """
)


def test_resume_after_sigkill(tiny64, tmp_path):
    ref, p = tmp_path / "ref.jsonl", tmp_path / "t.jsonl"
    collect_trajectories(tiny64.model, [EOS], jobs(), str(ref), CFG, progress=False)
    total = len(read_records(ref))
    root = str(Path(__file__).resolve().parents[1])
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT.format(root=root, path=str(p))], cwd=root)
    deadline = time.time() + 120
    while time.time() < deadline:
        if p.exists() and p.read_text().count("\n") >= 4:
            break
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    with p.open("a") as f:
        f.write('{"prompt_id": "p3", "blo')  # as if killed mid-line
    done = p.read_text().count("\n")
    assert 4 <= done < total
    collect_trajectories(tiny64.model, [EOS], jobs(), str(p), CFG, progress=False)
    keys = [r.key for r in read_records(p)]
    assert len(keys) == len(set(keys)) == total
    assert _records(p) == _records(ref)

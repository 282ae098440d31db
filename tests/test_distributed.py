"""Several processes: sharding helpers, the trajectory merge, the replica check, and real 2-process runs
(CPU, gloo DDP under ``accelerate launch``) of collect, train-cllm (with a resume) and train-chimera on a
tiny random-init model with SmolLM2's tokenizer."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch

from fastforward.chimera.checkpoint import load_draft
from fastforward.cli import main
from fastforward.cllm.trajectories import (
    TrajectoryRecord,
    group_by_prompt,
    merge_trajectory_files,
    read_records,
)
from fastforward.decoders.registry import build_decoder
from fastforward.distributed import check_replicas_agree, parameter_checksum, shard, shard_path
from fastforward.errors import FastForwardError
from fastforward.models.loading import load_model

from .conftest import greedy_config, make_tiny
from .test_cllm_train import tiny_dir  # noqa: F401  (fixture)


def test_shards_are_disjoint_and_together_complete():
    items = list(range(11))
    parts = [shard(items, r, 3) for r in range(3)]
    assert sorted(x for p in parts for x in p) == items
    assert parts[1] == [1, 4, 7, 10]
    assert shard_path("t.jsonl", 1, 2) == "t.jsonl.rank1-of-2"
    with pytest.raises(ValueError):
        shard(items, 3, 3)


def _record(pid: str, block: int) -> TrajectoryRecord:
    return TrajectoryRecord(pid, block, 2, [1, 2], [[5, 6], [3, 4]])


def test_merge_adds_each_record_once_and_is_idempotent(tmp_path):
    from fastforward.cllm.trajectories import TrajectoryWriter

    parts = [tmp_path / "t.jsonl.rank0-of-2", tmp_path / "t.jsonl.rank1-of-2"]
    with TrajectoryWriter(parts[0]) as w:
        w.write(_record("a", 0))
        w.write(_record("a", 1))
    with TrajectoryWriter(parts[1]) as w:
        w.write(_record("b", 0))
        w.write(_record("a", 1))  # a duplicate across shards must not appear twice
    out = tmp_path / "t.jsonl"
    assert merge_trajectory_files(out, parts) == (3, 3)
    assert merge_trajectory_files(out, parts) == (0, 3)
    assert sorted(r.key for r in read_records(out)) == [("a", 0), ("a", 1), ("b", 0)]


class _FakeAccel:
    """Two ranks whose checksums are given: what ``check_replicas_agree`` sees through ``gather``."""

    num_processes, distributed_type, device = 2, "MULTI_CPU", torch.device("cpu")

    def __init__(self, other_delta: float) -> None:
        self.delta = other_delta

    def gather(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, x + self.delta])


def test_replica_check_passes_equal_weights_and_names_a_drift():
    model = make_tiny(seed=0).model
    assert check_replicas_agree(_FakeAccel(0.0), model) == pytest.approx(float(parameter_checksum(model)))
    with pytest.raises(FastForwardError, match="not synchronised"):
        check_replicas_agree(_FakeAccel(1e-3), model)
    other = make_tiny(seed=1).model
    assert float(parameter_checksum(model)) != float(parameter_checksum(other))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch_cmd(*args: str) -> tuple[list[str], dict[str, str]]:
    """``accelerate launch`` with 2 CPU processes (torchrun underneath, gloo), one thread each."""
    cmd = [
        sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
        "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
        "--main_process_ip", "127.0.0.1", "--main_process_port", str(_free_port()),
        "-m", "fastforward", *args,
    ]  # fmt: skip
    return cmd, {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}


def _launch(*args: str) -> subprocess.CompletedProcess:
    cmd, env = _launch_cmd(*args)
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def _launch_and_kill_after(path: Path, *args: str) -> None:
    """Start a 2-process run and kill all of it (launcher and workers) once ``path`` exists."""
    cmd, env = _launch_cmd(*args)
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    deadline = time.monotonic() + 300
    while not path.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert proc.poll() is None, f"the run ended before it could be killed: {proc.stderr.read()[-2000:]}"
    # torchrun may start its workers in sessions of their own: kill the launcher and every descendant, and
    # wait until each is gone, so nothing writes after this returns
    procs = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    for p in procs:
        p.kill()
    _, alive = psutil.wait_procs(procs, timeout=60)
    assert not alive, f"processes of the killed run still alive: {alive}"
    proc.wait(timeout=60)


def test_two_processes_collect_train_resume_and_chimera(tiny_dir, tmp_path):  # noqa: F811
    # collect: each rank takes every other prompt; the merged file holds every (prompt, block) once, the
    # same keys one process collects
    traj, single = tmp_path / "traj.jsonl", tmp_path / "single.jsonl"
    common = ["--model", str(tiny_dir), "--dataset", "gsm8k", "--split", "train", "--limit", "4",
              "--block-size", "4", "--max-new-tokens", "8", "--batch-size", "2", "--dtype", "float32"]  # fmt: skip
    _launch("collect", *common, "--out", str(traj))
    assert main(["collect", *common, "--threads", "1", "--out", str(single)]) == 0
    merged = [r.key for r in read_records(traj)]
    assert len(merged) == len(set(merged)) and set(merged) == {r.key for r in read_records(single)}
    assert len(group_by_prompt(read_records(traj))) == 4
    assert all(Path(shard_path(str(traj), r, 2)).exists() for r in range(2))

    # train-cllm on 2 processes, killed (SIGKILL, every process) once its step-2 checkpoint is complete,
    # resumed on 2 processes from the newest complete checkpoint to 2 steps beyond it
    out = tmp_path / "cllm"
    train = ["train-cllm", "--model", str(tiny_dir), "--data", str(traj), "--out", str(out), "--log-every", "1",
             "--save-every", "1", "--batch-size", "2"]  # fmt: skip
    _launch_and_kill_after(
        out / "checkpoints" / "step-2" / "trainer_state.json", *train, "--max-steps", "100000"
    )
    assert not (out / "cllm_training.json").exists()
    done = [p for p in (out / "checkpoints").glob("step-*") if (p / "trainer_state.json").exists()]
    last = max(int(p.name.split("-")[1]) for p in done)
    resumed = _launch(*train, "--max-steps", str(last + 2), "--resume")
    assert f"resumed from {out / 'checkpoints' / f'step-{last}'}" in resumed.stderr, resumed.stderr
    meta = json.loads((out / "cllm_training.json").read_text())
    assert meta["steps"] == last + 2 and meta["processes"] == 2 and meta["replica_checksum"] is not None
    trained = load_model(str(out), "float32")
    ids = read_records(traj)[0].prompt_ids[: read_records(traj)[0].prompt_len]
    cfg = greedy_config(12, trained.eos_token_ids)
    jac = build_decoder("jacobi", trained, None, {"block_size": 4}).generate(ids, cfg).tokens
    assert jac == build_decoder("ar", trained).generate(ids, cfg).tokens

    # Jacobi Forcing is the same trainer with another packing: 2 processes, replicas agree
    jf = tmp_path / "forcing"
    _launch("train-cllm", "--model", str(tiny_dir), "--data", str(traj), "--out", str(jf),
            "--objective", "forcing", "--max-steps", "2", "--batch-size", "2")  # fmt: skip
    meta = json.loads((jf / "cllm_training.json").read_text())
    assert meta["processes"] == 2 and meta["replica_checksum"] is not None
    assert meta["config"]["objective"] == "forcing" and meta["steps"] == 2

    # train-chimera: data collected by rank (one file per record), a draft trained under DDP, replicas equal
    draft_dir = tmp_path / "chimera"
    _launch("train-chimera", "--model", str(tiny_dir), "--out", str(draft_dir), "--sharegpt", "2", "--gsm8k", "2",
            "--max-new-tokens", "8", "--gen-batch-size", "2", "--heads", "2", "--steps", "2", "--batch-size", "1",
            "--max-len", "32", "--precision", "fp32", "--save-every", "1")  # fmt: skip
    assert len(list((draft_dir / "data" / "train").glob("rec_*.safetensors"))) == 4
    meta = json.loads((draft_dir / "chimera_config.json").read_text())
    assert meta["processes"] == 2 and meta["replica_checksum"] is not None and meta["steps_done"] == 2
    target = load_model(str(tiny_dir), "float32")
    load_draft(draft_dir, target.model)
    dec = build_decoder("chimera", target, None, {"heads": str(draft_dir), "tree": "chain"})
    cfg = greedy_config(12, target.eos_token_ids)
    assert dec.generate(ids, cfg).tokens == build_decoder("ar", target).generate(ids, cfg).tokens

"""Packing exactness, the trainer (resume, outputs a loadable HF directory) and a tiny end-to-end pipeline."""

from __future__ import annotations

import json
import random

import pytest
import torch
from accelerate import Accelerator

from fastforward.cli import main
from fastforward.cllm.collect import CollectConfig, PromptJob, collect_trajectories
from fastforward.cllm.losses import first_wrong_mask
from fastforward.cllm.packing import collate, pack_prompt
from fastforward.cllm.trajectories import group_by_prompt, read_records
from fastforward.core.decoder import GenerationConfig
from fastforward.decoders.registry import build_decoder
from fastforward.models.loading import load_model

from .conftest import make_tiny

EOS = 63


@pytest.fixture(scope="module")
def tiny_records(tmp_path_factory):
    tiny = make_tiny(vocab=64, seed=4)
    path = tmp_path_factory.mktemp("traj") / "t.jsonl"
    jobs = [PromptJob(f"p{i}", [3 + i, 8, 9, 10 + i, 12], answer_ids=[20 + i, 21, 22, EOS]) for i in range(3)]
    collect_trajectories(
        tiny.model,
        [EOS],
        jobs,
        str(path),
        CollectConfig(block_size=5, max_new_tokens=15, batch_size=3),
        False,
    )
    return tiny, group_by_prompt(read_records(path))


def _separate(model, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits[0]


@pytest.mark.parametrize(
    "loss,ar_target", [("global", "teacher"), ("local", "teacher"), ("global", "labels")]
)
def test_packed_logits_equal_separate_forwards(tiny_records, loss, ar_target):
    tiny, groups = tiny_records
    recs = groups["p1"]
    ex = pack_prompt(recs, random.Random(0), loss, states_per_block=3, ar_target=ar_target)
    assert ex is not None and ex.student_idx.numel() > 0
    b = collate([ex])
    with torch.no_grad():
        packed = tiny.model(
            input_ids=b["input_ids"], position_ids=b["position_ids"], attention_mask=b["attention_mask"]
        ).logits[0]
    main_ids = recs[-1].teacher_output_ids
    main_logits = _separate(tiny.model, main_ids)
    assert torch.allclose(packed[: len(main_ids)], main_logits, atol=1e-4)
    # every packed position's logits equal a separate forward of exactly what it sees (context + own segment)
    toks, vis = b["input_ids"][0].tolist(), ex.visible
    n_main = len(main_ids)
    for q in range(n_main, len(toks)):
        cols = vis[q].nonzero().flatten().tolist()
        ctx = [c for c in cols if c < n_main]
        own = [c for c in cols if c >= n_main]
        assert ctx == list(range(len(ctx))) and own == list(range(own[0], q + 1))
        ref = _separate(tiny.model, main_ids[: len(ctx)] + [toks[c] for c in own])[-1]
        assert torch.allclose(packed[q], ref, atol=1e-4)
        assert b["position_ids"][0, q].item() == len(ctx) + len(own) - 1
    # a student and its teacher predict the same block position
    pos = b["position_ids"][0]
    assert torch.equal(pos[ex.student_idx], pos[ex.teacher_idx])
    # AR targets are what the indexed logits should predict
    if ar_target == "teacher":
        fixed = [t for r in recs for t in r.fixed_point]
        assert ex.ar_targets.tolist() == fixed
        assert b["input_ids"][0][ex.ar_idx + 1].tolist() == fixed
    else:
        assert ex.ar_targets.tolist() == recs[0].answer_ids


def test_packing_lists_only_positions_after_the_first_wrong_token(tiny_records):
    _, groups = tiny_records
    recs = groups["p0"]
    ex = pack_prompt(recs, random.Random(1), "global", states_per_block=100)
    expected = 0
    for r in recs:
        cands = [s for s in r.trajectory[:-1] if any(first_wrong_mask(s, r.fixed_point))]
        expected += sum(sum(first_wrong_mask(s, r.fixed_point)) for s in cands)
    assert ex.student_idx.numel() == expected
    # teacher indices are main-sequence positions (global loss), students sit after the main sequence
    n_main = len(recs[-1].teacher_output_ids)
    assert (ex.teacher_idx < n_main).all() and (ex.student_idx >= n_main).all()


def test_collate_pads_and_offsets_indices(tiny_records):
    _, groups = tiny_records
    a = pack_prompt(groups["p0"], random.Random(0))
    b = pack_prompt(groups["p2"], random.Random(0), states_per_block=1)
    batch = collate([a, b])
    length = batch["input_ids"].shape[1]
    assert length == max(a.length, b.length)
    assert torch.equal(batch["student_idx"][: a.student_idx.numel()], a.student_idx)
    assert torch.equal(batch["student_idx"][a.student_idx.numel() :], b.student_idx + length)
    assert batch["attention_mask"].shape == (2, 1, length, length)


# --------------------------------------------------------------------------- end to end (tiny, with tokenizer)


@pytest.fixture(scope="module")
def tiny_dir(smollm2, tmp_path_factory):
    """A random-init 2-layer llama with SmolLM2's tokenizer and chat template, saved as an HF directory."""
    tok = smollm2.tokenizer
    tiny = make_tiny(vocab=len(tok), seed=0)
    tiny.model.config.eos_token_id = smollm2.eos_token_ids[0]
    tiny.model.generation_config.eos_token_id = smollm2.eos_token_ids[0]
    d = tmp_path_factory.mktemp("tiny_model")
    tiny.model.save_pretrained(d)
    tok.save_pretrained(d)
    return d


def _train(tiny_dir, traj, out, *extra):
    args = [
        "train-cllm",
        "--model",
        str(tiny_dir),
        "--data",
        str(traj),
        "--out",
        str(out),
        "--log-every",
        "1",
    ]
    return main(args + list(extra))


def _tiny_trajectories(tiny_dir, tmp_path, n: int) -> str:
    """Trajectories of n short hand-made prompts (block 4, 8 tokens), collected with the tiny model."""
    traj = tmp_path / "traj.jsonl"
    jobs = [PromptJob(f"q{i}", [1, 2 + i, 3, 4], [5, 6]) for i in range(n)]
    model = load_model(str(tiny_dir), "float32").model
    collect_trajectories(
        model, [model.config.eos_token_id], jobs, str(traj), CollectConfig(4, 8, n), progress=False
    )
    return str(traj)


def test_end_to_end_collect_train_load_decode(tiny_dir, tmp_path):
    traj = tmp_path / "traj.jsonl"
    rc = main(
        ["collect", "--model", str(tiny_dir), "--dataset", "gsm8k", "--split", "train", "--limit", "3",
         "--block-size", "4", "--max-new-tokens", "12", "--batch-size", "2", "--dtype", "float32",
         "--out", str(traj)]
    )  # fmt: skip
    assert rc == 0
    recs = read_records(traj)
    assert len(group_by_prompt(recs)) == 3 and all(r.answer_ids for r in recs)
    out = tmp_path / "cllm"
    assert _train(tiny_dir, traj, out, "--max-steps", "3", "--ar-target", "labels", "--distance", "js") == 0
    meta = json.loads((out / "cllm_training.json").read_text())
    assert meta["steps"] == 3 and meta["train_tokens"] > 0 and meta["config"]["distance"] == "js"
    trained = load_model(str(out), "float32")
    before = load_model(str(tiny_dir), "float32")
    diff = sum(
        (a - b).abs().sum()
        for a, b in zip(trained.model.parameters(), before.model.parameters(), strict=True)
    )
    assert diff > 0  # the weights moved
    ids = read_records(traj)[0].prompt_ids[: recs[0].prompt_len]
    gen = GenerationConfig(max_new_tokens=12, eos_token_ids=trained.eos_token_ids)
    jac = build_decoder("jacobi", trained, None, {"block_size": 4}).generate(ids, gen).tokens
    assert jac == build_decoder("ar", trained).generate(ids, gen).tokens


def test_training_resume_matches_uninterrupted_run(tiny_dir, tmp_path):
    traj = _tiny_trajectories(tiny_dir, tmp_path, 3)
    full, part = tmp_path / "full", tmp_path / "part"
    common = ("--loss", "local", "--distance", "rkl")
    assert _train(tiny_dir, traj, full, "--max-steps", "3", *common) == 0
    assert _train(tiny_dir, traj, part, "--max-steps", "2", "--save-every", "1", *common) == 0
    assert (part / "checkpoints" / "step-1" / "trainer_state.json").exists()
    # "interrupted" after step 1: drop the final model, resume to 3 steps
    (part / "cllm_training.json").unlink()
    assert _train(tiny_dir, traj, part, "--max-steps", "3", "--resume", *common) == 0
    a, b = load_model(str(full), "float32").model, load_model(str(part), "float32").model
    for x, y in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.allclose(x, y, atol=1e-6)
    assert main(["train-cllm", "--model", str(tiny_dir), "--data", str(traj), "--out", str(full)]) == 2


def test_training_after_another_accelerator_in_the_same_process(tiny_dir, tmp_path):
    """Accelerate's state is process-wide: a Chimera run (default Accelerator) before a CLLM run with bf16
    autocast must not make the second one fail (it did: 'AcceleratorState has already been initialized')."""
    Accelerator()  # what chimera.train does first in the same process
    traj = _tiny_trajectories(tiny_dir, tmp_path, 2)
    assert _train(tiny_dir, traj, tmp_path / "o", "--max-steps", "1", "--mixed-precision", "bf16") == 0


def test_snapshots_and_learning_curve(tiny_dir, tmp_path):
    traj = _tiny_trajectories(tiny_dir, tmp_path, 3)
    out = tmp_path / "run"
    assert _train(tiny_dir, traj, out, "--max-steps", "3", "--snapshot-every", "2") == 0
    snap = out / "snapshots" / "step-2"
    assert json.loads((snap / "snapshot.json").read_text())["step"] == 2
    # the snapshot is a loadable model holding the step-2 weights (bf16), not the base or final ones
    s2 = load_model(str(snap), "float32").model
    final, base = load_model(str(out), "float32").model, load_model(str(tiny_dir), "float32").model
    assert any((a - b).abs().max() > 0 for a, b in zip(s2.parameters(), base.parameters(), strict=True))
    assert any((a - b).abs().max() > 0 for a, b in zip(s2.parameters(), final.parameters(), strict=True))

    res, png = tmp_path / "curve.json", tmp_path / "curve.png"
    rc = main(
        ["cllm-curve", "--base", str(tiny_dir), "--run", str(out), "--dataset", "gsm8k", "--split", "heldout",
         "--limit", "2", "--block-size", "4", "--max-new-tokens", "8", "--dtype", "float32",
         "--out", str(res), "--plot", str(png)]
    )  # fmt: skip
    assert rc == 0
    pts = json.loads(res.read_text())["points"]
    assert [p["label"] for p in pts] == ["base", "step-2", "final"]
    assert [p["step"] for p in pts] == [0, 2, 3]
    assert pts[0]["train_tokens"] == 0 < pts[1]["train_tokens"] < pts[2]["train_tokens"]
    assert all(p["prompts"] == 2 and p["mean_accepted_tokens"] >= 1.0 for p in pts)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["cllm-curve", "--base", str(tiny_dir), "--run", str(tmp_path / "none")]) == 2
    (snap / "snapshot.json").write_text("{not json")
    assert main(["cllm-curve", "--base", str(tiny_dir), "--run", str(out), "--limit", "1"]) == 2


def test_eval_cllm_writes_the_result_contract(tiny_dir, tmp_path):
    traj = _tiny_trajectories(tiny_dir, tmp_path, 2)
    out, res = tmp_path / "cllm", tmp_path / "cllm_gsm8k.json"
    assert _train(tiny_dir, traj, out, "--max-steps", "2") == 0
    rc = main(
        ["eval-cllm", "--base", str(tiny_dir), "--cllm", str(out), "--limit", "2", "--max-new-tokens", "8",
         "--block-size", "4", "--dtype", "float32", "--exact-limit", "1", "--warmup", "0", "--out", str(res),
         "--quality-limit", "3", "--quality-batch-size", "2"]
    )  # fmt: skip
    assert rc == 0
    r = json.loads(res.read_text())
    for side in ("base", "cllm"):
        assert r[side]["prompts"] == 2 and r[side]["mean_accepted_tokens"] >= 1.0
        q = r[side]["quality"]  # the larger batched accuracy run replaces the speed run's accuracy
        assert q["n"] == 3 == r[side]["accuracy_prompts"] and len(q["correct_per_prompt"]) == 3
        assert r[side]["accuracy"] == q["accuracy"] and "speed_run_accuracy" in r[side]
        assert r[side]["fp32_jacobi_equals_ar"] == "1/1"  # Jacobi is exact for any model, trained or not
        keys = {"speedup_vs_ar", "accuracy", "repetition_rate", "perplexity_on_teacher_answers"}
        assert keys <= set(r[side])
    assert set(r["accuracy_delta_cllm_minus_base"]) == {"b_minus_a", "stderr", "only_a", "only_b"}
    assert r["training"]["steps"] == 2 and r["train_tokens"] == r["training"]["train_tokens"] > 0
    assert r["training"]["data_report"] and r["hardware"] and r["wall_time_s"] > 0


def test_corrupt_trajectory_file_is_a_clean_cli_error(tiny_dir, tmp_path, capsys):
    traj = tmp_path / "bad.jsonl"
    traj.write_text('{"prompt_id": 1}\n')
    assert _train(tiny_dir, traj, tmp_path / "o", "--max-steps", "1") == 2
    assert "bad.jsonl:1" in capsys.readouterr().err


@pytest.mark.slow
def test_real_recipe_smollm2_collect_train_eval(tmp_path):
    """The recipe's commands at small scale on the real SmolLM2 (minutes on a CPU)."""
    traj, out, res = tmp_path / "traj.jsonl", tmp_path / "cllm", tmp_path / "cllm_gsm8k.json"
    assert main(
        ["collect", "--model", "smollm2-135m", "--dataset", "gsm8k", "--split", "train", "--limit", "8",
         "--block-size", "16", "--max-new-tokens", "128", "--batch-size", "4", "--out", str(traj)]
    ) == 0  # fmt: skip
    assert main(
        ["train-cllm", "--model", "smollm2-135m", "--data", str(traj), "--out", str(out),
         "--max-steps", "20", "--save-every", "10"]
    ) == 0  # fmt: skip
    assert main(
        ["eval-cllm", "--base", "smollm2-135m", "--cllm", str(out), "--limit", "3", "--max-new-tokens", "64",
         "--exact-limit", "2", "--out", str(res)]
    ) == 0  # fmt: skip
    result = json.loads(res.read_text())
    for side in ("base", "cllm"):
        assert result[side]["fp32_exact"] is True
        assert result[side]["mean_accepted_tokens"] >= 1.0
    assert result["train_tokens"] > 0 and result["hardware"] and result["command"].startswith("fastforward")
    assert result["training"]["steps"] == 20

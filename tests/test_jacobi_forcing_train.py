"""Jacobi Forcing training data and loss: noise schedule, noise-aware packing (each packed position's logits
equal a plain causal forward over what it should see), loss positions and weights, and the trainer end to
end with a token budget."""

from __future__ import annotations

import json
import random

import pytest
import torch

from fastforward.cli import main
from fastforward.cllm.cllm import budget_spent
from fastforward.cllm.collect import CollectConfig, PromptJob, collect_trajectories
from fastforward.cllm.forcing import (
    chained_blocks,
    first_mismatch,
    forcing_visibility,
    noise_ratio,
    pack_forcing,
    pick_noisy_state,
    schedule_target,
)
from fastforward.cllm.losses import consistency_loss
from fastforward.cllm.packing import collate, pack_prompt
from fastforward.cllm.trajectories import TrajectoryRecord, group_by_prompt, read_records
from fastforward.core.decoder import GenerationConfig
from fastforward.decoders.registry import build_decoder
from fastforward.models.loading import load_model

from .conftest import make_tiny
from .test_cllm_train import tiny_dir  # noqa: F401  (fixture)

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
        CollectConfig(block_size=5, max_new_tokens=20, batch_size=3),
        False,
    )
    return tiny, group_by_prompt(read_records(path))


# --------------------------------------------------------------------------- pure functions


def test_noise_ratio_and_first_mismatch():
    fixed = [1, 2, 3, 4]
    assert first_mismatch([1, 2, 9, 4], fixed) == 2 and noise_ratio([1, 2, 9, 4], fixed) == 0.5
    assert noise_ratio(fixed, fixed) == 0.0 and noise_ratio([9, 2, 3, 4], fixed) == 1.0


def test_cyclic_schedule_ramps_clean_to_noisy_and_repeats():
    rng = random.Random(0)
    got = [schedule_target(j, 4, "progressive", rng) for j in range(9)]
    assert got == pytest.approx([0, 1 / 3, 2 / 3, 1, 0, 1 / 3, 2 / 3, 1, 0])
    rev = [schedule_target(j, 4, "reverse", rng) for j in range(4)]
    assert rev == pytest.approx([1, 2 / 3, 1 / 3, 0])
    levels = {schedule_target(j, 4, "random", rng) for j in range(200)}
    assert sorted(levels) == pytest.approx([0, 1 / 3, 2 / 3, 1])
    with pytest.raises(ValueError):
        schedule_target(0, 4, "sideways", rng)


def test_pick_noisy_state_takes_the_nearest_ratio_noisiest_on_ties():
    traj = [[9, 9, 9, 9], [1, 9, 9, 9], [1, 2, 9, 9], [1, 2, 3, 4]]  # ratios 1, .75, .5, 0
    assert pick_noisy_state(traj, 1.0) == [9, 9, 9, 9]
    assert pick_noisy_state(traj, 0.6) == [1, 2, 9, 9]
    assert pick_noisy_state(traj, 0.625) == [1, 9, 9, 9]  # tie between .75 and .5: the noisier
    assert pick_noisy_state(traj, 0.0) == [1, 2, 3, 4]


def test_visibility_noisy_sees_noisy_clean_sees_clean():
    vis = forcing_visibility(2, [2, 2])  # P P k0 k0 l0 l0 k1 k1 l1 l1
    k0, l0, k1, l1 = [2, 3], [4, 5], [6, 7], [8, 9]
    row = {q: set(vis[q].nonzero().flatten().tolist()) for q in range(10)}
    assert row[1] == {0, 1}
    assert row[k1[1]] == {0, 1, *k0, *k1}
    assert row[l1[0]] == {0, 1, *l0, l1[0]}
    assert row[l0[1]] == {0, 1, *l0} and row[k0[0]] == {0, 1, k0[0]}


def test_chained_blocks_stop_at_a_gap():
    def rec(j: int, prompt: list[int]) -> TrajectoryRecord:
        return TrajectoryRecord("p", j, 2, prompt, [[7, 7], [j, j]])

    r0 = rec(0, [1, 2])
    r1 = rec(1, r0.teacher_output_ids)
    r3 = rec(3, r1.teacher_output_ids + [2, 2])
    assert [r.block_index for r in chained_blocks([r3, r1, r0])] == [0, 1]
    assert chained_blocks([r1]) == []


# --------------------------------------------------------------------------- packing


def _logits(model, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits[0]


@pytest.mark.parametrize("strategy", ["progressive", "random"])
def test_packed_logits_equal_plain_causal_forwards(tiny_records, strategy):
    """Logits at k_j = a causal forward over [P, k_0..k_j]; at l_j = over [P, l_0..l_j] (fp32)."""
    tiny, groups = tiny_records
    recs = chained_blocks(groups["p1"])
    assert len(recs) >= 3
    ex = pack_forcing(recs, random.Random(0), window=3, strategy=strategy)
    b = collate([ex])
    with torch.no_grad():
        packed = tiny.model(
            input_ids=b["input_ids"], position_ids=b["position_ids"], attention_mask=b["attention_mask"]
        ).logits[0]
    toks = b["input_ids"][0].tolist()
    p = recs[0].prompt_len
    assert torch.allclose(packed[:p], _logits(tiny.model, toks[:p]), atol=1e-4)
    noisy_ctx, clean_ctx, start = toks[:p], toks[:p], p
    for r in recs:
        m = len(r.fixed_point)
        k, l_ = toks[start : start + m], toks[start + m : start + 2 * m]
        assert l_ == r.fixed_point and k in [list(s) for s in r.trajectory]
        noisy_ctx, clean_ctx = noisy_ctx + k, clean_ctx + l_
        ref_k, ref_l = _logits(tiny.model, noisy_ctx), _logits(tiny.model, clean_ctx)
        assert torch.allclose(packed[start : start + m], ref_k[-m:], atol=1e-4)
        assert torch.allclose(packed[start + m : start + 2 * m], ref_l[-m:], atol=1e-4)
        # noisy and clean copies share position ids
        pos = b["position_ids"][0]
        assert torch.equal(pos[start : start + m], pos[start + m : start + 2 * m])
        assert pos[start].item() == len(noisy_ctx) - m
        start += 2 * m
    assert start == len(toks)


def test_loss_positions_targets_and_weight(tiny_records):
    _, groups = tiny_records
    recs = chained_blocks(groups["p0"])
    ex = pack_forcing(recs, random.Random(0), window=2)
    p, toks = recs[0].prompt_len, ex.input_ids.tolist()
    # AR: the clean chain predicts every fixed-point token from the token before it
    fixed = [t for r in recs for t in r.fixed_point]
    assert ex.ar_targets.tolist() == fixed and ex.ar_idx[0].item() == p - 1
    chain = list(recs[0].prompt_ids) + fixed
    pos = ex.position_ids.tolist()
    for i, idx in enumerate(ex.ar_idx.tolist()):  # the clean token before each target, at its position
        assert toks[idx] == chain[p - 1 + i] and pos[idx] == p - 1 + i
    # consistency: per block, students are the noisy copy from its first wrong token on; teachers the
    # clean copy at the same offset; a block whose noisy state is its fixed point adds nothing
    start, expected_students = p, []
    for j, r in enumerate(recs):
        m = len(r.fixed_point)
        k = toks[start : start + m]
        if j % 2 == 0:
            assert k == r.fixed_point  # window 2: blocks 0, 2, ... are clean
        last = m - 1 if r.eos else m
        expected_students += [start + t for t in range(first_mismatch(k, r.fixed_point), last)]
        start += 2 * m
    assert ex.student_idx.tolist() == expected_students and expected_students
    m_of = {}
    start = p
    for r in recs:
        m = len(r.fixed_point)
        for t in range(m):
            m_of[start + t] = start + m + t
        start += 2 * m
    assert [m_of[s] for s in ex.student_idx.tolist()] == ex.teacher_idx.tolist()
    assert ex.consistency_weight == pytest.approx(1 / len(recs))
    assert collate([ex])["student_weight"].tolist() == pytest.approx([1 / len(recs)] * len(expected_students))


def test_budget_keeps_whole_leading_blocks(tiny_records):
    _, groups = tiny_records
    recs = chained_blocks(groups["p2"])
    p, m = recs[0].prompt_len, len(recs[0].fixed_point)
    ex = pack_forcing(recs, random.Random(0), max_tokens=p + 2 * m + 1)
    assert ex.length == p + 2 * m and ex.consistency_weight == 1.0
    assert pack_forcing(recs, random.Random(0), max_tokens=p + 1) is None


def test_weighted_consistency_loss_divides_by_blocks():
    torch.manual_seed(0)
    s, t = torch.randn(6, 11, requires_grad=True), torch.randn(6, 11)
    mask = torch.ones(6, dtype=torch.bool)
    plain = consistency_loss(s, t, mask)
    weighted = consistency_loss(s, t, mask, weights=torch.full((6,), 0.25))
    assert weighted.item() == pytest.approx(plain.item() / 4, rel=1e-6)
    weighted.backward()
    assert s.grad is not None and s.grad.abs().sum() > 0


def test_cllm_packing_keeps_unit_weights(tiny_records):
    _, groups = tiny_records
    ex = pack_prompt(groups["p0"], random.Random(0))
    assert ex.consistency_weight == 1.0


def test_budget_spent():
    assert not budget_spent(10**9, 0) and not budget_spent(5, 6) and budget_spent(6, 6)


# --------------------------------------------------------------------------- trainer end to end


def test_forcing_trainer_token_budget_resume_and_decode(tiny_dir, tmp_path):  # noqa: F811
    traj = tmp_path / "traj.jsonl"
    jobs = [PromptJob(f"q{i}", [1, 2 + i, 3, 4], [5, 6]) for i in range(3)]
    model = load_model(str(tiny_dir), "float32").model
    collect_trajectories(model, [model.config.eos_token_id], jobs, str(traj), CollectConfig(4, 12, 3), False)
    out = tmp_path / "jf"
    args = ["train-cllm", "--model", str(tiny_dir), "--data", str(traj), "--out", str(out),
            "--objective", "forcing", "--noise-window", "3", "--max-steps", "50", "--max-train-tokens", "60",
            "--save-every", "1", "--log-every", "1"]  # fmt: skip
    assert main(args) == 0
    meta = json.loads((out / "cllm_training.json").read_text())
    assert meta["config"]["objective"] == "forcing" and meta["config"]["noise_window"] == 3
    assert meta["train_tokens"] >= 60 and meta["steps"] < 50  # stopped by the budget, not the step count
    assert meta["wall_time_s"] > 0
    # the budget is honoured across a resume: an interrupted run continued to the same budget stops there
    part = tmp_path / "part"
    cut = [a if a != "60" else "30" for a in args]
    cut[cut.index(str(out))] = str(part)
    assert main(cut) == 0
    (part / "cllm_training.json").unlink()
    resumed = [a if a != str(out) else str(part) for a in args] + ["--resume"]
    assert main(resumed) == 0
    meta2 = json.loads((part / "cllm_training.json").read_text())
    assert meta2["steps"] == meta["steps"] and meta2["train_tokens"] == meta["train_tokens"]
    a, b = load_model(str(out), "float32").model, load_model(str(part), "float32").model
    for x, y in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.allclose(x, y, atol=1e-6)
    # a plain HF directory: Jacobi on it equals its own greedy AR
    trained = load_model(str(out), "float32")
    ids = read_records(traj)[0].prompt_ids[:4]
    gen = GenerationConfig(max_new_tokens=12, eos_token_ids=trained.eos_token_ids)
    jac = build_decoder("jacobi", trained, None, {"block_size": 4}).generate(ids, gen).tokens
    assert jac == build_decoder("ar", trained).generate(ids, gen).tokens


def test_forcing_flags_are_checked(tiny_dir, tmp_path, capsys):  # noqa: F811
    base = [
        "train-cllm",
        "--model",
        str(tiny_dir),
        "--data",
        str(tmp_path / "x.jsonl"),
        "--out",
        str(tmp_path / "o"),
    ]
    assert main(base + ["--noise-window", "0"]) == 2
    assert main(base + ["--max-train-tokens", "-1"]) == 2
    with pytest.raises(SystemExit) as e:  # argparse choices: the same one-line error, exit 2
        main(base + ["--objective", "diffusion"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "--noise-window" in err and "--max-train-tokens" in err and "--objective" in err


def test_side_by_side_curve_and_eval(tiny_dir, tmp_path):  # noqa: F811
    """The recipe's last two steps at tiny scale: both runs on one curve, and eval-jacobi's result contract."""
    traj = tmp_path / "traj.jsonl"
    jobs = [PromptJob(f"q{i}", [1, 2 + i, 3, 4], [5, 6]) for i in range(2)]
    model = load_model(str(tiny_dir), "float32").model
    collect_trajectories(model, [model.config.eos_token_id], jobs, str(traj), CollectConfig(4, 8, 2), False)
    runs = {}
    for objective in ("cllm", "forcing"):
        runs[objective] = tmp_path / objective
        assert main(
            ["train-cllm", "--model", str(tiny_dir), "--data", str(traj), "--out", str(runs[objective]),
             "--objective", objective, "--max-steps", "2", "--snapshot-every", "1"]
        ) == 0  # fmt: skip
    curve, png = tmp_path / "curve.json", tmp_path / "curve.png"
    assert main(
        ["cllm-curve", "--base", str(tiny_dir), "--run", f"cllm={runs['cllm']}",
         "--run", f"jacobi_forcing={runs['forcing']}", "--limit", "1", "--block-size", "4",
         "--max-new-tokens", "6", "--dtype", "float32", "--out", str(curve), "--plot", str(png)]
    ) == 0  # fmt: skip
    doc = json.loads(curve.read_text())
    assert set(doc["series"]) == {"cllm", "jacobi_forcing"}
    assert [p["label"] for p in doc["series"]["jacobi_forcing"]] == ["base", "step-1", "step-2"]
    assert doc["points"] == doc["series"]["cllm"] and png.read_bytes()[:4] == b"\x89PNG"

    res = tmp_path / "jf.json"
    assert main(
        ["eval-jacobi", "--base", str(tiny_dir), "--model", f"cllm={runs['cllm']}",
         "--model", f"jacobi_forcing={runs['forcing']}", "--variant", "plain:",
         "--variant", "recycle:pool_size=2", "--limit", "2", "--block-size", "4", "--max-new-tokens", "8",
         "--dtype", "float32", "--exact-limit", "1", "--warmup", "0", "--out", str(res)]
    ) == 0  # fmt: skip
    r = json.loads(res.read_text())
    keys = {"mean_accepted_tokens", "speedup_vs_ar", "accuracy", "nll_by_base", "repetition_rate",
            "train_tokens", "wall_time_s", "identical_to_own_ar_fp32", "decoder_options"}  # fmt: skip
    for label in ("base", "cllm", "jacobi_forcing"):
        assert keys <= set(r[label]) and set(r[label]["variants"]) == {"plain", "recycle"}
        assert r[label]["identical_to_own_ar_fp32"] == 1.0  # exact for any model
        assert r[label]["mean_accepted_tokens"] >= 1.0 and r[label]["nll_by_base"] > 0
    assert r["base"]["train_tokens"] == 0
    assert (
        r["jacobi_forcing"]["training"]["objective"] == "forcing" and r["jacobi_forcing"]["train_tokens"] > 0
    )
    assert r["base"]["nll_on_base_answers"] == pytest.approx(r["base"]["nll_by_base"])
    assert r["hardware"] and r["command"].startswith("fastforward")
    # the base as a reference only: its answers (for the NLLs), no Jacobi variants of its own
    assert main(
        ["eval-jacobi", "--base", str(tiny_dir), "--model", f"jacobi_forcing={runs['forcing']}",
         "--skip-base-variants", "--limit", "1", "--block-size", "4", "--max-new-tokens", "6",
         "--dtype", "float32", "--exact-limit", "1", "--warmup", "0", "--out", str(res)]
    ) == 0  # fmt: skip
    r = json.loads(res.read_text())
    assert r["base"]["variants"] == {} and r["base"]["best_variant"] is None and r["base"]["nll_by_base"] > 0
    assert r["jacobi_forcing"]["identical_to_own_ar_fp32"] == 1.0


def test_distinct_n():
    from fastforward.cllm.compare import distinct_n

    assert distinct_n([[1, 2, 3, 4]], 2) == 1.0
    assert distinct_n([[1, 2, 1, 2, 1, 2]], 2) == pytest.approx(2 / 5)
    assert distinct_n([[1]], 2) == 0.0

"""Chimera training: both loss terms are real, a tiny end-to-end run (data -> train -> save/load -> decode),
resume, head top-k evaluation, and the CLI command is registered."""

from __future__ import annotations

import json

import pytest
import torch

from fastforward.chimera.checkpoint import load_draft, save_draft
from fastforward.chimera.data import DistillConfig, load_record, records, write_records
from fastforward.chimera.train import (
    TrainConfig,
    chimera_loss,
    head_topk_accuracy,
    make_batch,
    new_draft,
    train,
)
from fastforward.cli import build_parser
from fastforward.decoders.ar import ARDecoder
from fastforward.decoders.registry import build_decoder
from fastforward.errors import FastForwardError

from .conftest import greedy_config, make_tiny


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory):
    tiny = make_tiny()
    out = tmp_path_factory.mktemp("chimera") / "data"
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, 500, (8,), generator=g).tolist() for _ in range(6)]
    write_records(tiny, prompts, out, DistillConfig(max_new_tokens=16))
    return tiny, out


def test_records_hold_ids_states_and_the_targets_argmax(tiny_data):
    tiny, data = tiny_data
    files = records(data)
    assert len(files) == 6
    rec = load_record(files[0])
    assert rec["prompt_len"] == 8 and len(rec["ids"]) == 8 + 16
    assert rec["hidden"].shape == (24, 64)
    # the answer is the target's greedy continuation: label after j == token at j + 1
    assert torch.equal(rec["next"][7:-1], rec["ids"][8:])
    mtime = files[0].stat().st_mtime_ns
    write_records(tiny, [[1, 2, 3]] * 6, data, DistillConfig(max_new_tokens=16))  # cached: nothing rewritten
    assert files[0].stat().st_mtime_ns == mtime


def test_batched_collection_answers_like_ar_and_resumes_only_missing_records(tmp_path):
    tiny = make_tiny(seed=5)
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, 500, (n,), generator=g).tolist() for n in (3, 9, 5, 12, 7)]
    cfg = DistillConfig(max_new_tokens=10, gen_batch_size=2)  # left padding inside every batch
    out = tmp_path / "data"
    write_records(tiny, prompts, out, cfg)
    ar = ARDecoder(tiny.model)
    eos = tiny.eos_token_ids
    first = [load_record(p) for p in records(out)]
    for p, rec in zip(prompts, first, strict=True):
        assert rec["ids"].tolist() == p + ar.generate(p, greedy_config(10, eos)).tokens
    for i in (1, 4):  # an interrupted run: two records missing
        (out / f"rec_{i:06d}.safetensors").unlink()
    keep = (out / "rec_000000.safetensors").stat().st_mtime_ns
    write_records(tiny, prompts, out, cfg)
    assert (out / "rec_000000.safetensors").stat().st_mtime_ns == keep
    again = [load_record(p) for p in records(out)]
    assert [r["ids"].tolist() for r in again] == [r["ids"].tolist() for r in first]
    assert all(torch.equal(a["hidden"], b["hidden"]) for a, b in zip(again, first, strict=True))


def _batch(data):
    return make_batch([load_record(p) for p in records(data)[:2]], 32)


def test_loss_has_finite_ce_and_mse_and_mse_changes_the_gradient(tiny_data):
    tiny, data = tiny_data
    batch = _batch(data)
    grads = {}
    for w in (0.0, 1.0):
        torch.manual_seed(0)
        draft = new_draft(tiny.model, num_heads=3)
        loss, parts = chimera_loss(draft, batch, mse_weight=w)
        assert {"ce", "mse", "loss"} <= parts.keys()
        assert all(torch.isfinite(torch.tensor(v)) for v in parts.values())
        assert parts["mse"] > 0
        assert parts["loss"] == pytest.approx(parts["ce"] + w * parts["mse"], rel=1e-5)
        loss.backward()
        grads[w] = draft.trigram.w1.weight.grad.clone()
    assert not torch.allclose(grads[0.0], grads[1.0])


def test_ce_position_sampling_estimates_the_same_loss(tiny_data):
    tiny, data = tiny_data
    batch = _batch(data)
    torch.manual_seed(0)
    draft = new_draft(tiny.model, num_heads=2)
    _, full = chimera_loss(draft, batch, 1.0)
    _, all_kept = chimera_loss(draft, batch, 1.0, ce_positions=10**6)  # more than there are: no sampling
    assert all_kept == full
    samples = [chimera_loss(draft, batch, 1.0, ce_positions=4)[1] for _ in range(40)]
    assert all(s["mse"] == full["mse"] for s in samples)  # MSE always on every position
    ces = torch.tensor([s["ce"] for s in samples])
    assert len(set(ces.tolist())) > 1  # the subset really changes
    assert ces.mean().item() == pytest.approx(full["ce"], rel=0.05)  # and estimates the whole loss


def test_negative_ce_positions_is_a_clear_error(tiny_data, tmp_path):
    tiny, data = tiny_data
    with pytest.raises(FastForwardError, match="ce_positions"):
        train(TrainConfig(data=str(data), out=str(tmp_path / "x"), steps=1, ce_positions=-1), tiny.model)


def test_medusa_ablation_has_no_mse_term(tiny_data):
    tiny, data = tiny_data
    _, parts = chimera_loss(new_draft(tiny.model, variant="medusa"), _batch(data), 1.0)
    assert "mse" not in parts and parts["ce"] > 0


def test_tiny_training_run_saves_loads_and_decodes(tiny_data, tmp_path):
    tiny, data = tiny_data
    cfg = TrainConfig(data=str(data), out=str(tmp_path / "d"), num_heads=3, steps=4, batch_size=2, max_len=32)
    cfg = TrainConfig(**{**cfg.__dict__, "warmup": 2, "save_every": 2, "log_every": 1, "bf16": False})
    draft, log = train(cfg, tiny.model)
    assert log["steps"] == 4 and len(log["history"]) == 4
    loaded = load_draft(tmp_path / "d", tiny.model)
    for k, v in draft.state_dict().items():
        assert torch.equal(v, loaded.state_dict()[k]), k
    meta = json.loads((tmp_path / "d" / "chimera_config.json").read_text())
    assert meta["chimera"]["num_heads"] == 3 and meta["steps_done"] == 4
    size = (tmp_path / "d" / "draft.safetensors").stat().st_size
    assert size < 2 * sum(p.numel() for p in draft.parameters()) * 4  # small: no copy of the target
    dec = build_decoder("chimera", tiny, None, {"heads": str(tmp_path / "d"), "tree": "chain"})
    prompt = load_record(records(data)[0])["ids"][:8].tolist()
    cfg_g = greedy_config(16)
    assert dec.generate(prompt, cfg_g).tokens == ARDecoder(tiny.model).generate(prompt, cfg_g).tokens
    acc = head_topk_accuracy(loaded, data, top=5)
    assert len(acc["head_topk"]) == 3 and all(len(r) == 5 for r in acc["head_topk"])
    for row in acc["head_topk"]:
        assert row == sorted(row) and row[0] >= 0.0 and row[-1] <= 1.0


def test_resume_continues_from_the_checkpoint(tiny_data, tmp_path):
    tiny, data = tiny_data
    base = dict(data=str(data), out=str(tmp_path / "r"), num_heads=2, batch_size=2, max_len=32, bf16=False)
    train(TrainConfig(**base, steps=2, save_every=2, log_every=1), tiny.model)
    _, log = train(TrainConfig(**base, steps=3, save_every=2, log_every=1), tiny.model, resume=True)
    assert [h["step"] for h in log["history"]] == [1, 2, 3]


def test_own_vocab_heads_save_their_matrices_and_load(tiny_data, tmp_path):
    tiny, _ = tiny_data
    draft = new_draft(tiny.model, num_heads=2, vocab="own")
    save_draft(draft, tmp_path / "own")
    loaded = load_draft(tmp_path / "own", tiny.model)
    assert torch.equal(loaded.vocab_weights[1], draft.vocab_weights[1])
    other = make_tiny(vocab=256)
    with pytest.raises(FastForwardError, match="vocab"):
        load_draft(tmp_path / "own", other.model)


def test_train_chimera_command_is_registered():
    args = build_parser().parse_args(["train-chimera", "--out", "x", "--variant", "medusa", "--eval"])
    assert args.variant == "medusa" and args.eval and args.vocab == "shared"


def test_trained_heads_with_cost_sized_trees_and_a_lookup_branch_stay_exact(tiny_data, tmp_path):
    """The configuration behind the Chimera-with-lookup figures (``tree=auto`` + ``lookup``) with heads that
    were really trained (on the tiny target's own continuations, until they are mostly right): greedy output
    is AR's while the trained heads' drafts are accepted and the lookup branch is taken."""
    tiny, data = tiny_data
    cfg = TrainConfig(
        data=str(data), out=str(tmp_path / "d"), num_heads=3, steps=150, batch_size=6, max_len=32
    )
    cfg = TrainConfig(
        **{**cfg.__dict__, "lr": 3e-3, "warmup": 5, "save_every": 150, "log_every": 50, "bf16": False}
    )
    draft, _ = train(cfg, tiny.model)
    top1 = head_topk_accuracy(draft, data, top=1)["head_topk"][0][0]
    assert top1 > 0.5, f"the heads did not learn (head-1 top-1 {top1:.2f})"
    dec = build_decoder("chimera", tiny, None, {"heads": str(tmp_path / "d"), "lookup": 4, "ngram_max": 2})
    assert dec.options.tree == "auto"
    ar = ARDecoder(tiny.model)
    cfg_g = greedy_config(16)
    drafted = lookup = 0
    for r in records(data):
        prompt = load_record(r)["ids"][:8].tolist()
        out = dec.generate(prompt, cfg_g)
        assert out.tokens == ar.generate(prompt, cfg_g).tokens
        drafted += out.stats.new_tokens - out.stats.target_forwards
        lookup += out.stats.extras["lookup_steps"]
    assert drafted > 0  # trained drafts were accepted

"""Batched quality evaluation: batched greedy must pick the same tokens as our batch-1 AR decoder (otherwise the
accuracy it reports would belong to a different decoder), plus the pure bookkeeping (EOS cut, paired deltas)."""

from __future__ import annotations

import json

import pytest

from fastforward.cli import main
from fastforward.core.batched import batched_greedy, cut_at_eos
from fastforward.decoders.ar import ARDecoder
from fastforward.errors import FastForwardError
from fastforward.eval.quality import paired, summarize
from tests.conftest import greedy_config, make_tiny


def test_cut_at_eos_keeps_the_eos_and_respects_the_cap():
    assert cut_at_eos([5, 6, 9, 9, 9], eos_ids=[9], max_new_tokens=10) == [5, 6, 9]
    assert cut_at_eos([5, 6, 7, 8], eos_ids=[9], max_new_tokens=3) == [5, 6, 7]
    assert cut_at_eos([9], eos_ids=[2, 9], max_new_tokens=3) == [9]


def test_paired_difference_counts_discordant_prompts():
    a = [True, True, False, False, True]
    b = [True, False, True, True, True]
    d = paired(a, b)
    assert (d["only_a"], d["only_b"]) == (1, 2)
    assert d["b_minus_a"] == pytest.approx(0.2)
    # per-prompt differences (0,-1,1,1,0): variance 0.56, stderr sqrt(0.56/5)
    assert d["stderr"] == pytest.approx((0.56 / 5) ** 0.5)
    assert paired([True] * 4, [True] * 4)["stderr"] == 0.0
    with pytest.raises(FastForwardError):
        paired([True], [True, False])


def test_summary_counts_truncation_and_repetition():
    s = summarize(
        outputs=[[1, 2, 9], [3] * 12, [4, 5, 6]],
        texts=["#### 7", "3 3 3", "#### 1"],
        golds=["7", "7", None],
        eos_ids=[9],
        max_new_tokens=3,
    )
    assert (s["correct"], s["n"], s["accuracy"]) == (1, 3, 0.5)  # unscored sample (no gold) excluded
    assert s["repetition_rate"] == pytest.approx(1 / 3)  # the run of 12 equal tokens
    assert s["truncated_rate"] == pytest.approx(2 / 3)  # rows 2 and 3 hit the cap without EOS


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_batched_greedy_equals_batch1_ar_on_a_tiny_model(arch):
    tiny = make_tiny(arch, seed=3)
    prompts = [[1, 5, 7], [2, 3, 4, 5, 6, 7, 8, 9, 10], [11], [12, 13, 14, 15, 16]]
    eos = (tiny.model.config.eos_token_id,)
    ar = ARDecoder(tiny.model)
    want = [ar.generate(p, greedy_config(12, eos)).tokens for p in prompts]
    got = batched_greedy(tiny.model, prompts, 12, eos, batch_size=3)
    assert got == want


def test_batched_greedy_equals_batch1_ar_on_real_prompts(smollm2, real_prompts):
    prompts = real_prompts[:6]  # GSM8K held-out, different lengths -> real left padding
    eos = smollm2.eos_token_ids
    ar = ARDecoder(smollm2.model)
    want = [ar.generate(p, greedy_config(40, eos)).tokens for p in prompts]
    assert batched_greedy(smollm2.model, prompts, 40, eos, batch_size=6) == want


def test_bad_batch_inputs_are_clear_errors(tiny):
    with pytest.raises(FastForwardError, match="batch size"):
        batched_greedy(tiny.model, [[1, 2]], 4, (511,), batch_size=0)
    with pytest.raises(FastForwardError, match="context length"):  # tiny context: 512 positions
        batched_greedy(tiny.model, [[1, 2], [3] * 500], 16, (511,))
    with pytest.raises(FastForwardError, match="empty"):
        batched_greedy(tiny.model, [[1, 2], []], 4, (511,))


def test_eval_quality_cli_writes_per_model_and_paired_results(tmp_path, capsys):
    out = tmp_path / "q.json"
    rc = main(
        ["eval-quality", "--model", "smollm2-135m", "--model", "smollm2-135m", "--limit", "3",
         "--max-new-tokens", "8", "--batch-size", "2", "--out", str(out)]
    )  # fmt: skip
    assert rc == 0
    r = json.loads(out.read_text())
    m = r["models"]["smollm2-135m"]
    assert m["n"] == 3 and len(m["per_sample"]) == 3 and m["truncated_rate"] == 1.0
    assert r["paired_vs_first"]["smollm2-135m"]["b_minus_a"] == 0.0
    assert "accuracy" in capsys.readouterr().out

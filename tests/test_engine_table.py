"""results/engine.json is built from the files that measured it (:mod:`fastforward.bench.engine_table`):
the named keys, the ratios against the same run's compiled AR and against llama.cpp at the same precision."""

from __future__ import annotations

from fastforward.bench.engine_table import append_benches, bench_runs, llamacpp_rows, run_details

LLAMA = [
    {"model_type": "llama ?B F32", "n_prompt": 0, "n_gen": 64, "avg_ts": 25.0},
    {"model_type": "llama ?B F32", "n_prompt": 8, "n_gen": 0, "avg_ts": 160.0},
    {"model_type": "llama ?B Q8_0", "n_prompt": 0, "n_gen": 64, "avg_ts": 70.0},
]
BENCH = {
    "model": "smollm2-135m", "dtype": "float32", "engine": "compiled", "dataset": "mtbench", "isa": "AVX2",
    "revision": "abc", "command": "fastforward bench --compile on",
    "methods": {
        "ar": {"tokens_per_s": 30.0, "mean_accepted_tokens": 1.0, "identical_to_ar": 1.0, "ar_step_share": None},
        "pld": {"tokens_per_s": 36.0, "mean_accepted_tokens": 1.4, "identical_to_ar": 1.0, "ar_step_share": 0.8},
        "hf_generate": {"tokens_per_s": 15.0, "mean_accepted_tokens": 1.0, "identical_to_ar": 1.0},
    },
}  # fmt: skip
KEYS = {
    "model", "dtype", "weights", "engine", "method", "dataset", "tokens_per_s", "speedup_vs_compiled_ar",
    "ratio_vs_llamacpp_ar_same_precision", "tokens_per_forward", "identical_to_ar_fp32", "isa",
}  # fmt: skip


def test_llamacpp_rows_split_generation_and_batches() -> None:
    ar, curves = llamacpp_rows(LLAMA)
    assert ar == {"F32": 25.0, "Q8_0": 70.0}
    assert curves == {"F32": {8: 50.0}}  # 8 tokens at 160 tok/s: 50 ms per batch


def test_bench_runs_keep_the_named_keys_and_ratios() -> None:
    ar, _ = llamacpp_rows(LLAMA)
    runs = {r["method"]: r for r in bench_runs(BENCH, ar)}
    assert all(set(r) >= KEYS for r in runs.values())
    assert all(set(r) == KEYS for r in runs.values())  # exactly the keys; the rest in run_details
    assert runs["pld"]["speedup_vs_compiled_ar"] == 1.2
    assert runs["pld"]["ratio_vs_llamacpp_ar_same_precision"] == 1.44  # against F32, not Q8_0
    assert runs["hf_generate"]["engine"] == "eager" and runs["pld"]["engine"] == "compiled"
    eager = bench_runs({**BENCH, "engine": "eager"}, ar)
    assert all(r["speedup_vs_compiled_ar"] is None for r in eager)  # no compiled AR in that run


def test_appended_benches_keep_the_earlier_rows_and_come_once() -> None:
    """``append``: earlier rows stay as built (their own references), a new file's rows follow, with ratios
    against its own llama.cpp row; the same file appended twice adds nothing the second time."""
    earlier = {"runs": [{"method": "old"}], "run_details": [{"command": "old run"}], "cost_curves": {"x": 1}}
    methods = {**BENCH["methods"], "llamacpp": {"tokens_per_s": 40.0, "mean_accepted_tokens": 1.0}}
    new = {**BENCH, "methods": methods, "command": "fastforward bench --llamacpp"}
    table = append_benches(earlier, [new])
    assert table["runs"][0] == {"method": "old"} and table["cost_curves"] == {"x": 1}
    added = {r["method"]: r for r in table["runs"][1:]}
    assert set(added) == {"ar", "pld", "hf_generate", "llamacpp"}
    assert added["ar"]["ratio_vs_llamacpp_ar_same_precision"] == 0.75
    assert append_benches(table, [new]) == table


def test_run_details_keep_the_ar_step_share_and_provenance() -> None:
    details = {d["method"]: d for d in run_details(BENCH)}
    assert details["pld"]["ar_step_share"] == 0.8
    assert details["pld"]["revision"] == "abc" and details["hf_generate"]["engine"] == "eager"


def test_quantized_weights_are_compared_with_llamacpp_at_their_own_precision() -> None:
    ar, _ = llamacpp_rows(LLAMA)
    runs = {r["method"]: r for r in bench_runs({**BENCH, "weights": "int8"}, ar)}
    assert runs["ar"]["weights"] == "int8"
    assert runs["ar"]["ratio_vs_llamacpp_ar_same_precision"] == round(30.0 / 70.0, 3)  # Q8_0, not F32
    assert all(r["identical_to_ar_fp32"] is None for r in runs.values())  # bf16 activations: no fp32 check
    int4 = bench_runs({**BENCH, "weights": "int4"}, ar)
    assert all(r["ratio_vs_llamacpp_ar_same_precision"] is None for r in int4)  # no Q4_1 row measured


def test_a_llamacpp_row_timed_in_the_same_run_is_the_reference() -> None:
    """A bench with ``--llamacpp`` timed llama.cpp on its own prompts: ratios are against that row, which is
    engine llamacpp with no token-level comparison; ``ar_eager`` is the eager engine inside a compiled run."""
    ar, _ = llamacpp_rows(LLAMA)
    methods = {
        **BENCH["methods"],
        "ar_eager": {"tokens_per_s": 12.0, "mean_accepted_tokens": 1.0, "identical_to_ar": 1.0},
        "llamacpp": {"tokens_per_s": 40.0, "mean_accepted_tokens": 1.0, "identical_to_ar": 0.0},
    }
    runs = {r["method"]: r for r in bench_runs({**BENCH, "methods": methods}, ar)}
    assert runs["ar"]["ratio_vs_llamacpp_ar_same_precision"] == 0.75  # 30 / 40, not 30 / llama-bench's 25
    assert runs["llamacpp"]["engine"] == "llamacpp" and runs["llamacpp"]["identical_to_ar_fp32"] is None
    assert runs["ar_eager"]["engine"] == "eager" and runs["ar"]["engine"] == "compiled"


def test_an_interleaved_round_keeps_both_engines_costs_and_ratios() -> None:
    from fastforward.bench.engine_table import interleave_row

    row = interleave_row(2, "float32", {1: 20.0, 8: 31.0}, {1: 18.0, 8: 36.0})
    assert row == {
        "dtype": "float32", "round": 2, "ours_k1": 20.0, "ours_k8": 31.0, "ours_k8_k1": 1.55,
        "llamacpp_k1": 18.0, "llamacpp_k8": 36.0, "llamacpp_k8_k1": 2.0,
    }  # fmt: skip
    int8 = interleave_row(0, "bfloat16", {1: 50.0, 8: 200.0}, {1: 80.0, 8: 300.0}, "int8")
    # the weights say which GGUF the round ran against
    assert int8["weights"] == "int8" and int8["ours_k8_k1"] == 4.0
    assert "huge_page_bytes" not in int8
    # the pages our steps were timed on are said in the row
    assert (
        interleave_row(1, "float32", {1: 20.0, 8: 31.0}, {1: 18.0, 8: 36.0}, huge=6 << 21)["huge_page_bytes"]
        == 6 << 21
    )


def test_a_timed_forward_leaves_the_cache_as_it_found_it() -> None:
    """Every repeat of :func:`forward_ms` sees the same cached context: the engine is cut back after each."""
    import torch

    from fastforward.bench.engine_table import forward_ms
    from fastforward.core.engine import ModelEngine
    from tests.conftest import make_tiny

    engine = ModelEngine(make_tiny("llama", vocab=96, seed=0).model)
    with torch.inference_mode():
        engine.start(torch.arange(3, 23)[None], capacity=64)
        assert forward_ms(engine, 8, 3, 20) > 0
        assert engine.lengths == [20]
        engine.close()


def test_interleave_refuses_bad_rounds_and_a_missing_llamacpp_in_one_line(
    monkeypatch, tmp_path, capsys
) -> None:
    """Exit 2 and one line, before any model loads: a round count under 1, and a folder with no llama.cpp build
    (the line says how to build it)."""
    import pytest

    from fastforward.bench import engine_table

    for argv in (["interleave", "--rounds", "0"], ["interleave", "--llamacpp", str(tmp_path)]):
        monkeypatch.setattr("sys.argv", ["engine_table", *argv])
        with pytest.raises(SystemExit) as exit_:
            engine_table.main()
        assert exit_.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert "Traceback" not in "\n".join(err) and "error:" in err[-1]
    assert "recipes/llamacpp.sh build" in err[-1]

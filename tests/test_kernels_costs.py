"""Kernel paths (prepacked linears) and cost curves with the choices made from them.

No ISA is assumed: where oneDNN may refuse a dtype on one CPU and accept it on another, both outcomes are
checked for what they must be. The chooser is fed curves recorded on both kinds of CPU."""

from __future__ import annotations

import json

import pytest
import torch

from fastforward.bench import costs
from fastforward.core.decoder import GenerationConfig
from fastforward.decoders.registry import build_decoders
from fastforward.errors import FastForwardError
from fastforward.models.kernels import PackedLinear, check_path, path_of, prepare
from tests.conftest import make_tiny


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("shape", [(1, 1, 48), (1, 7, 48), (3, 48)])
def test_packed_linear_matches_linear(bias, shape):
    torch.manual_seed(0)
    lin = torch.nn.Linear(48, 40, bias=bias)
    packed = PackedLinear(lin, rows=8)
    x = torch.randn(shape)
    with torch.no_grad():
        torch.testing.assert_close(packed(x), lin(x), rtol=1e-5, atol=1e-5)
    assert packed.weight is lin.weight


def test_prepare_swaps_every_linear_and_keeps_outputs():
    ref = make_tiny()
    m = make_tiny()
    prepare(m.model, "prepacked")
    assert path_of(m.model) == "prepacked" and path_of(ref.model) == "default"
    assert not any(type(x) is torch.nn.Linear for x in m.model.modules())
    assert (
        sum(isinstance(x, PackedLinear) for x in m.model.modules()) == 2 * 7 + 1
    )  # q k v o gate up down, head
    ids = torch.randint(0, 500, (1, 23))
    with torch.no_grad():
        torch.testing.assert_close(m.model(ids).logits, ref.model(ids).logits, rtol=1e-4, atol=1e-4)


def test_tied_embeddings_stay_tied():
    m = make_tiny()
    m.model.lm_head.weight = m.model.model.embed_tokens.weight
    prepare(m.model, "prepacked")
    assert m.model.lm_head.weight is m.model.model.embed_tokens.weight


@pytest.mark.parametrize("method", ["jacobi", "lookahead", "pld"])
def test_parallel_methods_exact_on_prepacked_path(method):
    """Lossless within the path: every method on prepacked weights equals AR on the same weights."""
    m = prepare(make_tiny(seed=3).model, "prepacked")
    loaded = make_tiny(seed=3)
    loaded.model = m
    config = GenerationConfig(max_new_tokens=40, eos_token_ids=())
    decoders = build_decoders(f"ar,{method}", loaded, None, {})
    prompt = torch.randint(0, 500, (1, 12), generator=torch.Generator().manual_seed(1))
    outs = [d.generate(prompt, config).tokens for d in decoders.values()]
    assert len(outs[0]) == 40 and outs[1] == outs[0]


def test_unknown_path_and_unsupported_dtype_are_one_line_errors():
    with pytest.raises(FastForwardError, match="unknown path"):
        check_path("fast", torch.float32)
    check_path("prepacked", torch.float32)  # fp32 runs wherever oneDNN exists (x86 CPUs)
    try:  # bf16: oneDNN runs it on AVX-512/AVX-NE-CONVERT CPUs and refuses elsewhere
        check_path("prepacked", torch.bfloat16)
    except FastForwardError as e:
        assert "\n" not in str(e) and "float32" in str(e)
    else:
        m = make_tiny()
        m.model.to(torch.bfloat16)
        prepare(m.model, "prepacked")
        with torch.no_grad():
            assert torch.isfinite(m.model(torch.tensor([[1, 2, 3]])).logits).all()


def test_cost_curve_schema_and_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FASTFORWARD_CACHE", str(tmp_path))
    m = make_tiny()
    curve = costs.cached_curve(m, ks=(1, 2, 8), context=16, repeats=1)
    assert [r["k"] for r in curve] == [1, 2, 8]
    assert set(curve[0]) == {"model", "dtype", "isa", "path", "engine", "k", "ms", "relative_to_k1"}
    assert curve[0]["engine"] == "eager"
    assert curve[0]["relative_to_k1"] == 1.0 and all(r["ms"] > 0 for r in curve)
    assert json.loads(costs.cache_file("tiny-llama", "float32", "default", 16).read_text()) == curve

    def measured_again(*a, **k):
        raise AssertionError("a cached curve must not be measured again")

    with monkeypatch.context() as mp:
        mp.setattr(costs, "cost_curve", measured_again)
        assert costs.cached_curve(m, ks=(1, 2, 8), context=16) == curve
        assert costs.cached_curve(m, ks=(1, 8), context=16) == [curve[0], curve[2]]
    # a k the cache does not hold is measured, not silently missing
    wider = costs.cached_curve(m, ks=(1, 2, 4, 8), context=16, repeats=1)
    assert [r["k"] for r in wider] == [1, 2, 4, 8]


@pytest.mark.parametrize("text", ['[{"k": 1, "ms"', "{}", '[{"ms": 3.0}]', "[1, 2]"])
def test_a_cost_curve_cache_that_does_not_read_is_measured_again(tmp_path, monkeypatch, capsys, text):
    """A cut-short or edited cache file costs one line and a new measurement, never a traceback in the build
    of a decoder that reads the curve (jacobi's and lookahead's gates, suffix, recycle, Chimera)."""
    monkeypatch.setenv("FASTFORWARD_CACHE", str(tmp_path))
    m = make_tiny()
    f = costs.cache_file("tiny-llama", "float32", "default", 16)
    f.parent.mkdir(parents=True)
    f.write_text(text)
    curve = costs.cached_curve(m, ks=(1, 2), context=16, repeats=1)
    assert [r["k"] for r in curve] == [1, 2] and json.loads(f.read_text()) == curve
    err = capsys.readouterr().err
    assert "does not read" in err and len(err.strip().splitlines()) == 1


def _curve(dtype: str, path: str, isa: str, k1: float, rel: dict[int, float]) -> list[dict]:
    return [{"model": "smollm2-135m", "dtype": dtype, "isa": isa, "path": path, "k": k, "ms": k1 * r,
             "relative_to_k1": r} for k, r in {1: 1.0, **rel}.items()]  # fmt: skip


# SmolLM2-135M, forward over k tokens after a 200-token prompt (docs/environment facts, 2026-11-22/23).
AVX2 = (
    _curve("float32", "default", "AVX2", 72, {4: 1.67, 8: 1.73, 16: 1.91, 32: 3.3})
    + _curve("bfloat16", "default", "AVX2", 60, {4: 1.55, 8: 2.51, 16: 4.76, 32: 8.96})
    + _curve("float32", "prepacked", "AVX2", 66, {4: 1.11, 8: 1.25, 16: 1.6, 32: 1.95})
)
AVX512_BF16 = _curve("float32", "default", "AVX512 (+bf16)", 53, {4: 1.7, 8: 1.9, 16: 2.1, 32: 2.7}) + _curve(
    "bfloat16", "default", "AVX512 (+bf16)", 29, {4: 1.05, 8: 1.1, 16: 1.3, 32: 1.8}
)


def test_choose_from_recorded_curves_of_both_cpus():
    # AVX-512 with bf16 instructions: bf16 is the cheapest for AR and for an 8-token verify forward
    assert (costs.choose(AVX512_BF16, 1).dtype, costs.choose(AVX512_BF16, 8).dtype) == (
        "bfloat16",
        "bfloat16",
    )
    # AVX2 only: bf16 stays the cheapest 1-token path, but a verify forward is cheapest in fp32 prepacked
    ar, verify = costs.choose(AVX2, 1), costs.choose(AVX2, 8)
    assert (ar.dtype, ar.path) == ("bfloat16", "default")
    assert (verify.dtype, verify.path) == ("float32", "prepacked")
    assert "bfloat16/default" in verify.why
    # interpolation between measured k
    assert costs.choose(AVX2, 6).ms == pytest.approx(66 * (1.11 + 1.25) / 2)
    with pytest.raises(ValueError):
        costs.choose(AVX2, 64)


@pytest.mark.parametrize(
    ("curves", "k", "expected"),
    [
        (AVX2, 1, ("bfloat16", "default")),  # AR-only runs: the cheapest 1-token forward
        (AVX2, 8, ("float32", "prepacked")),  # parallel methods: never bf16 where it is emulated
        (AVX512_BF16, 1, ("bfloat16", "default")),
        (AVX512_BF16, 8, ("bfloat16", "default")),
    ],
)
def test_path_auto_chooses_from_recorded_curves_without_measuring(tmp_path, monkeypatch, curves, k, expected):
    """--path auto (with --dtype auto) on each kind of CPU: the recorded curves sit in this machine's cache
    and nothing is loaded or measured; a configuration the CPU cannot run (here: every one without a
    record, like oneDNN bf16 on AVX2) is skipped, not measured."""
    _record_curves(tmp_path, monkeypatch, curves)
    pick = costs.auto_config("smollm2-135m", "auto", "auto", k)
    assert (pick.dtype, pick.path) == expected
    assert pick.why.startswith(f"k={k}: {expected[0]}/{expected[1]}")


def test_path_auto_measures_again_over_a_cache_file_that_does_not_read(tmp_path, monkeypatch, capsys):
    """A cut-short cache file of one configuration costs one line and a measurement of that configuration
    (here stubbed with its recorded curve), not a traceback before the command starts."""
    from fastforward.models import loading

    _record_curves(tmp_path, monkeypatch, AVX2)
    costs.cache_file("smollm2-135m", "bfloat16", "default").write_text('[{"k": 1, "ms"')
    remeasured: list[str] = []

    def measure(loaded, **kw):
        remeasured.append(loaded)
        return costs.group_curves(AVX2)[("bfloat16", "default")]

    monkeypatch.setattr(loading, "load_model", lambda model, dtype, *a, **kw: f"{dtype}")
    monkeypatch.setattr(costs, "cached_curve", measure)
    pick = costs.auto_config("smollm2-135m", "auto", "auto", 8)
    assert (pick.dtype, pick.path) == ("float32", "prepacked") and remeasured == ["bfloat16"]
    assert sum("does not read" in line for line in capsys.readouterr().err.splitlines()) == 1


def _record_curves(tmp_path, monkeypatch, curves: list[dict]) -> None:
    """Put recorded curves in a scratch cache; a configuration without a record counts as one this CPU
    cannot run, and loading (i.e. measuring) fails the test."""
    from fastforward.models import kernels, loading

    monkeypatch.setenv("FASTFORWARD_CACHE", str(tmp_path))
    groups = costs.group_curves(curves)
    for (dtype, path), curve in groups.items():
        f = costs.cache_file("smollm2-135m", dtype, path)
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(json.dumps(curve))

    def check_path(path, dtype):
        if (str(dtype).removeprefix("torch."), path) not in groups:
            raise FastForwardError(f"{path} cannot run {dtype} on this CPU")

    def no_load(*a, **kw):
        raise AssertionError("recorded curves must not be measured again")

    monkeypatch.setattr(kernels, "check_path", check_path)
    monkeypatch.setattr(loading, "load_model", no_load)


@pytest.mark.parametrize("command", ["generate", "bench", "chat", "serve"])
@pytest.mark.parametrize(
    ("curves", "expected"),
    [(AVX2, ("float32", "prepacked")), (AVX512_BF16, ("bfloat16", "default"))],
)
def test_the_commands_run_the_measured_fastest_path_by_default(
    tmp_path, monkeypatch, command, curves, expected
):
    """No --dtype/--path given: generate, bench, chat and serve choose from this machine's recorded curves
    (a parallel method: the cheapest 8-token forward), not torch's default dispatch; trace keeps default."""
    from fastforward.cli import build_parser
    from fastforward.cli.common import resolve_path

    _record_curves(tmp_path, monkeypatch, curves)
    method = ["--methods", "ar,pld"] if command in ("bench", "serve") else ["--method", "pld"]
    argv = [command, *method, *(["hi"] if command == "generate" else [])]
    args = build_parser(command).parse_args(argv)
    assert (args.dtype, args.path) == ("auto", "auto")
    resolve_path(args)
    assert (args.dtype, args.path) == expected
    assert build_parser("trace").parse_args(["trace", "hi"]).path == "default"


def test_parallel_pays_only_with_enough_tokens_per_forward():
    # AVX2: 8-token forward 82.5 ms (fp32 prepacked) vs the best 1-token forward 60 ms (bf16)
    assert not costs.parallel_pays(AVX2, 8, 1.3)
    assert costs.parallel_pays(AVX2, 8, 1.5)
    assert costs.parallel_pays(AVX512_BF16, 8, 1.2)


def test_untied_linears_keep_only_packed_weights():
    """Three copies of a 1.5B fp32 model would not fit in 24 GiB: untied originals are released."""
    m = make_tiny()
    prepare(m.model, "prepacked")
    assert m.model.model.layers[0].mlp.up_proj.weight is None
    assert m.model.lm_head.weight is None  # tiny models are untied


def test_cpu_speed_records_are_flat_and_name_both_baselines():
    from fastforward.bench.cpu_speed import FASTEST_AR, _records

    def method(tps, lossless=True, ident=1.0, tpf=1.0, extras=None):
        return {"tokens_per_s": tps, "speedup_vs_ar": tps / 4.0, "lossless": lossless, "samples": 2,
                "mean_accepted_tokens": tpf, "draft_time_share": 0.0, "identical_to_ar": ident,
                "extras": extras or {}}  # fmt: skip

    result = {"model": "m", "dtype": "float32", "dataset": "gsm8k", "max_new_tokens": 64, "path": "prepacked",
              "methods": {"ar": method(4.0), "pld": method(6.0, tpf=2.0), "hf_pld": method(5.0, extras={"target_forwards_unknown": True}),
                          FASTEST_AR: method(5.0, ident=0.5)}}  # fmt: skip
    recs = {r["label"]: r for r in _records(result, {FASTEST_AR: ("bfloat16", "default")}, 5.0)}
    keys = {"model", "dtype", "dataset", "method", "lossless", "samples", "max_new_tokens", "tokens_per_s",
            "speedup_vs_ar", "speedup_vs_fastest_ar", "tokens_per_forward", "draft_time_share",
            "identical_to_ar_fp32"}  # fmt: skip
    assert all(keys <= set(r) for r in recs.values())
    assert recs["pld"]["speedup_vs_ar"] == 1.5 and recs["pld"]["speedup_vs_fastest_ar"] == 1.2
    assert (recs[FASTEST_AR]["method"], recs[FASTEST_AR]["dtype"], recs[FASTEST_AR]["path"]) == (
        "ar",
        "bfloat16",
        "default",
    )
    assert recs[FASTEST_AR]["identical_to_ar_fp32"] == 0.5  # bf16 agreement with fp32 AR, reported not hidden
    assert recs["hf_pld"]["tokens_per_forward"] is None
    assert recs["pld"]["path"] == "prepacked"


def test_fp32_logits_scores_bf16_hidden_states_against_a_float32_head() -> None:
    from fastforward.core.vocab import RestrictedHead, VocabSubset
    from fastforward.decoders.registry import build_decoder
    from fastforward.models.kernels import Fp32Head, fp32_logits

    from .conftest import greedy_config, make_tiny

    tiny = make_tiny()
    tiny.model.to(torch.bfloat16)
    w = tiny.model.lm_head.weight.detach().clone()
    ids = torch.tensor([[3, 17, 42, 99]])
    with torch.no_grad():
        hidden = tiny.model.model(input_ids=ids).last_hidden_state
        fp32_logits(tiny.model)
        logits = tiny.model(input_ids=ids).logits
    assert isinstance(tiny.model.lm_head, Fp32Head) and logits.dtype == torch.float32
    torch.testing.assert_close(logits, torch.nn.functional.linear(hidden.float(), w.float()))
    assert fp32_logits(tiny.model) is tiny.model  # idempotent
    # decoders and restricted draft heads take the float32 head as they take any other
    out = build_decoder("ar", tiny, None, {}).generate([3, 17, 42], greedy_config(8)).tokens
    assert len(out) == 8 and out == [int(t) for t in out]
    head = RestrictedHead(tiny.model.lm_head.weight, None, VocabSubset(torch.arange(0, 512, 2), 512))
    assert head(hidden[0, -1]).shape == (256,)
    f32 = make_tiny()
    assert fp32_logits(f32.model).lm_head is f32.model.lm_head  # a float32 model is left alone


def test_a_cost_curve_times_its_widths_in_turns(monkeypatch):
    """Round after round every width once (the first round a warm-up), so a host whose speed drifts moves every
    width alike instead of one width's whole sample."""
    from fastforward.core.engine import ModelEngine

    fed: list[int] = []
    forward = ModelEngine.forward

    def counting(self, blocks, *a, **k):
        fed.append(len(blocks[0].tokens))
        return forward(self, blocks, *a, **k)

    monkeypatch.setattr(ModelEngine, "forward", counting)
    from fastforward.models.costs import widths_ms

    ms = widths_ms(make_tiny().model, (1, 4, 8), context=16, repeats=2)
    assert fed == [1, 4, 8] * 3 and set(ms) == {1, 4, 8} and all(v > 0 for v in ms.values())


def test_the_suite_files_its_measured_costs_apart_from_the_users_cache(monkeypatch) -> None:
    """tests/conftest.py gives the session its own cache root: the pulled models are the user's (linked), the
    costs the suite measures on a busy machine are its own and never land in the user's folder."""
    from fastforward.models.cache import cache_root
    from tests.conftest import USER_CACHE

    root, (users,) = cache_root(), USER_CACHE
    assert root != users
    if (users / "models").is_dir():
        assert (root / "models").resolve() == (users / "models").resolve()
    filed = costs.cache_file("tiny-llama", "float32", "default").resolve()
    assert not filed.is_relative_to((users / "costs").resolve())

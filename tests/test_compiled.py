"""Compiled forwards (:mod:`fastforward.core.compiled` behind :class:`fastforward.core.engine.ModelEngine`):
one graph per width bucket over a fixed cache. Tokens through the compiled engine must equal greedy AR
through the eager one; padding a block up to its bucket must never change a token; every case that cannot
use the graphs (a request larger than the fixed cache, the cache busy with another request, a compiler
failure) runs eagerly, gives the same tokens and says why in its stats.

Tiny random-init Llama with inductor's default mode (seconds to compile, cached by inductor between runs);
the max-autotune kernels on real SmolLM2 are checked in the slow set."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch

from fastforward.core.compiled import (
    BUCKETS,
    amx_usable,
    bucket,
    buckets_that_fit,
    compiled,
    inductor_cache,
    parse_buckets,
    tier,
    tiers,
)
from fastforward.core.engine import Block, ModelEngine, chain_pieces, compile_forward, warm_buckets
from fastforward.decoders.registry import build_decoder
from fastforward.decoders.speculative import draft_models
from tests.conftest import greedy_config, make_tiny

# repetitive, so prompt lookup and lookahead find guesses and verify several tokens per step
PROMPT = [5, 17, 33, 2, 90, 41, 7, 64, 12, 3, 28] * 3
SEED = 3


@pytest.fixture(scope="module")
def pair():
    """The same tiny weights twice: one model eager (the reference), one with compiled forwards."""
    eager, fast = make_tiny("llama", vocab=96, seed=SEED), make_tiny("llama", vocab=96, seed=SEED)
    compile_forward(fast.model, capacity=256, mode=None)
    return eager, fast


def test_buckets() -> None:
    assert [bucket(k) for k in (1, 2, 3, 5, 8, 9, 32)] == [1, 2, 4, 8, 8, 16, 32]
    assert bucket(BUCKETS[-1] + 1) is None
    assert [bucket(k, (8, 1)) for k in (1, 2, 7, 8, 9)] == [1, 8, 8, 8, None]


def test_a_bucket_set_is_bounded_by_the_memory_its_packages_take() -> None:
    """Packages that hold their own weights: as many as fit in free memory with room for one more build,
    AR's 1-token width first, then 8; unknown memory or plenty of it: every bucket. The 1.5B in bf16 on a
    24 GB machine (3.56 GB of state, ~20 GB free once loaded) gets 1 and 8, which session 41 measured
    fitting (22.7 GB peak), where a third bucket's build would not."""
    assert buckets_that_fit(int(3.56e9), int(20e9)) == (1, 8)
    assert buckets_that_fit(int(3.56e9), int(12e9)) == (1,)
    assert buckets_that_fit(int(3.56e9), None) == BUCKETS
    assert buckets_that_fit(int(0.27e9), int(20e9)) == BUCKETS  # SmolLM2 in bf16
    assert buckets_that_fit(int(3.56e9), int(25e9)) == (1, 8, 32)
    assert parse_buckets("auto") is None and parse_buckets("8,1,8") == (1, 8)
    for bad in ("3", "", "1,x", "64"):
        with pytest.raises(ValueError, match="--buckets takes auto or widths"):
            parse_buckets(bad)


def test_a_subset_of_buckets_pads_up_to_the_next_and_keeps_tokens(pair) -> None:
    """Graphs for widths 1 and 8 only: prompt lookup's 2-7 token verifies run the 8-token graph (padded),
    and the tokens are eager AR's; no other width runs. A warm-up asking for width 1 where only 8 is
    compiled warms the 8 it pads up to. (The module's compiled model, its width set narrowed for the test:
    its graphs compile once for the module.)"""
    eager, fast = pair
    runner = compiled(fast.model)
    kept = runner.widths, runner.used
    try:
        runner.widths, runner.used = (1, 8), set()
        assert runner.identity().endswith("-w1,8")
        ref = build_decoder("ar", eager).generate(PROMPT, greedy_config(40)).tokens
        out = build_decoder("pld", fast).generate(PROMPT, greedy_config(40))
        assert out.tokens == ref and out.stats.extras["forward"] == "compiled"
        assert out.stats.parallel_steps > 0 and runner.used == {1, 8}
        runner.widths, runner.used = (8,), set()
        warm_buckets(fast.model, (1,))
        assert runner.used == {8}
    finally:
        runner.widths, runner.used = kept


def test_a_package_with_no_memory_to_build_runs_its_width_eagerly(tmp_path, monkeypatch, capsys) -> None:
    """Where each package holds its own weights and free memory cannot take one more build (which would be
    killed with the whole process, no swap), that width runs eagerly on the same cache, said in one line,
    and nothing is written to the store."""
    import fastforward.core.compiled as compiled_module
    import fastforward.core.memory as memory_module

    monkeypatch.setattr(compiled_module.CompiledForward, "_copies_weights", lambda self: True)
    monkeypatch.setattr(memory_module, "available_memory", lambda: 1_000_000)
    eager, fast = make_tiny("llama", vocab=96, seed=SEED), make_tiny("llama", vocab=96, seed=SEED)
    runner = compile_forward(fast.model, capacity=256, mode=None, store=tmp_path)
    assert runner.widths == (1,)
    out = build_decoder("ar", fast).generate(PROMPT, greedy_config(10))
    assert out.tokens == build_decoder("ar", eager).generate(PROMPT, greedy_config(10)).tokens
    err = capsys.readouterr().err.splitlines()
    assert [ln for ln in err if "graphs for widths" in ln] == [
        ln for ln in err if ln.startswith("[fastforward] --compile: graphs for widths 1 of 1,2,4,8,16,32")
    ] and len([ln for ln in err if "graphs for widths" in ln]) == 1
    assert len([ln for ln in err if "width 1 runs eagerly instead" in ln]) == 1
    assert not list(tmp_path.rglob("*.pt2")) and not runner.used and runner.widths == ()
    again = build_decoder("ar", fast).generate(PROMPT, greedy_config(10))  # the next request says eager
    assert again.tokens == out.tokens and again.stats.extras["forward"].startswith("eager (no width")


def test_a_build_that_fits_only_alone_unloads_the_loaded_packages_first(
    tmp_path, monkeypatch, capsys
) -> None:
    """Where a width's build does not fit beside the packages already loaded (each holding its weights) but
    fits without them, they are dropped, said in one line, the width is built and runs compiled, and the
    dropped ones load again from disk on their next use: no width runs eagerly, tokens are eager AR's."""
    import fastforward.core.compiled as compiled_module

    def room_for(self, build: bool, width: int) -> tuple[float, float] | None:  # fits only with none loaded
        return (9.0, 1.0) if build and any(r is not None for r in self._packages.values()) else None

    monkeypatch.setattr(compiled_module.CompiledForward, "room_for", room_for)
    eager, fast = make_tiny("llama", vocab=96, seed=SEED), make_tiny("llama", vocab=96, seed=SEED)
    ref = build_decoder("ar", eager).generate(PROMPT, greedy_config(24)).tokens
    runner = compile_forward(fast.model, capacity=256, mode=None, store=tmp_path)
    out = build_decoder("pld", fast, None, TWO_BUCKETS).generate(PROMPT, greedy_config(24))
    assert out.tokens == ref and out.stats.extras["forward"] == "compiled" and runner.failed is None
    err = capsys.readouterr().err
    assert "runs eagerly instead" not in err and len(runner.used) > 1
    assert err.count("to make room to build the") == len(runner.used) - 1  # every build after the first
    assert all("built_s" in runner.startup[f"k{w}-s256"] for w in runner.used)  # kept through a reload
    (folder,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert sorted(p.name for p in folder.glob("k*.pt2")) == sorted(f"k{w}-s256.pt2" for w in runner.used)
    # a warm-up whose builds unloaded packages loads them all again before it returns: nothing timed reloads
    again = make_tiny("llama", vocab=96, seed=SEED + 1)
    other = compile_forward(again.model, capacity=256, mode=None, store=tmp_path / "warm")
    warm_buckets(again.model, (1, 2, 4))
    assert other.unloads == 2 and sorted(k[0] for k, run in other._packages.items() if run is not None) == [
        1,
        2,
        4,
    ]


def test_unloading_helps_only_where_the_build_and_every_package_fit_afterwards() -> None:
    """Dropping loaded packages for a build pays only where the build then fits and all of them fit again
    beside the new one; else the new width is refused and the loaded ones stay (a 1-token package dropped
    for a wide one could otherwise lose its own room)."""
    from fastforward.core.memory import (
        ATEN_BF16_BUILD_FACTOR,
        BUILD_FACTOR,
        PACKAGE_FACTOR,
        unloading_helps,
    )

    w = 10**9
    assert not unloading_helps(w, None, 2) and not unloading_helps(w, 10**12, 0)
    # one loaded: the build needs 4.3 w, both loaded afterwards 2.08 w
    assert unloading_helps(w, int((BUILD_FACTOR - PACKAGE_FACTOR) * w) + 1, 1)
    assert not unloading_helps(w, int((BUILD_FACTOR - PACKAGE_FACTOR) * w) - 10**6, 1)
    # five loaded: the build fits once they are out, but six packages do not fit where five and the room did
    assert not unloading_helps(w, int(0.5 * w), 5) and unloading_helps(w, int(1.1 * w), 5)
    # a build that needs less (a bf16 one on ATen alone) is made room for where the default one is not
    small = ATEN_BF16_BUILD_FACTOR
    assert unloading_helps(w, int((small - PACKAGE_FACTOR) * w) + 1, 1, factor=small)
    assert not unloading_helps(w, int((small - PACKAGE_FACTOR) * w) + 1, 1)


def test_a_bf16_build_on_aten_alone_is_sized_by_its_own_smaller_factor() -> None:
    """The 1.5B's bf16 8-token build (oneDNN's linear) took 2.7-2.9x its weights and was refused at the
    templates' 4.3x with 15.2 GB free (session 60): only that kind of build is sized by the smaller factor."""
    import pytest
    import torch

    from fastforward.core.memory import (
        ATEN_BF16_BUILD_FACTOR,
        BUILD_FACTOR,
        PACKAGE_FACTOR,
        available_memory,
        build_factor,
        shortfall,
    )

    assert build_factor(torch.bfloat16, "ATEN", False) == ATEN_BF16_BUILD_FACTOR < BUILD_FACTOR
    for dtype, gemm, quantized in (
        (torch.bfloat16, "CPP", False),  # the templates (AMX, or 1-4 tokens on AVX-512)
        (torch.bfloat16, "ATEN", True),  # int8/int4 weights
        (torch.float16, "ATEN", False),
        (torch.float32, "ATEN", False),
    ):
        assert build_factor(dtype, gemm, quantized) == BUILD_FACTOR
    if available_memory() is None:
        pytest.skip("no /proc/meminfo: nothing is refused for memory here")
    huge = 10**15  # more than any machine has free: the need and what is free are both said
    need, free = shortfall(huge, True, ATEN_BF16_BUILD_FACTOR)
    assert need == ATEN_BF16_BUILD_FACTOR * huge / 1e9 and free < need
    assert shortfall(huge, False)[0] == PACKAGE_FACTOR * huge / 1e9  # loading needs the package alone


def test_cache_tiers() -> None:
    assert tiers(256) == (256,) and tiers(512) == (512,) and tiers(2048) == (512, 1024, 2048)
    assert tiers(1536) == (512, 1024, 1536)
    assert [tier(2048, n) for n in (1, 512, 513, 2048)] == [512, 512, 1024, 2048] and tier(2048, 2049) is None


def test_each_request_takes_the_smallest_fixed_cache_that_holds_it(monkeypatch) -> None:
    """Short and long requests on one compiled forward: each in its own tier, both tokens eager AR's."""
    import fastforward.core.compiled as compiled_module

    monkeypatch.setattr(compiled_module, "SMALLEST_TIER", 128)  # the tiny model's context is 512
    eager, fast = make_tiny("llama", vocab=96, seed=SEED), make_tiny("llama", vocab=96, seed=SEED)
    runner = compile_forward(fast.model, capacity=512, mode=None)
    for n, size in ((40, 128), (300, 512)):  # 33 + 40 + 32 slots fit 128; 33 + 300 + 32 need 512
        out = build_decoder("ar", fast).generate(PROMPT, greedy_config(n))
        assert out.tokens == build_decoder("ar", eager).generate(PROMPT, greedy_config(n)).tokens
        assert out.stats.extras["forward"] == "compiled" and runner.cache.capacity == size


@pytest.mark.parametrize(
    "method",
    # jacobi and lookahead also run in the slow set here and on real SmolLM2: the suite's time budget
    [
        "ar",
        "pld",
        pytest.param("jacobi", marks=pytest.mark.slow),
        pytest.param("lookahead", marks=pytest.mark.slow),
    ],
)
def test_compiled_methods_equal_eager_greedy_ar(pair, method) -> None:
    eager, fast = pair
    ref = build_decoder("ar", eager).generate(PROMPT, greedy_config(40)).tokens
    out = build_decoder(method, fast).generate(PROMPT, greedy_config(40))
    assert out.tokens == ref
    assert out.stats.extras["forward"] == "compiled"
    assert compiled(fast.model).failed is None


def test_bucket_padding_keeps_logits(pair) -> None:
    """A 3-node tree padded to the 4-token graph scores like the eager 3-node forward, and the cache keeps
    exactly the path asked for (the pad slot is stale, never seen)."""
    eager, fast = pair
    tree = Block([28, 5, 9], [-1, 0, 0])  # two children of the anchor: a tree, not a chain
    out = {}
    with torch.inference_mode():
        for name, lm in (("eager", eager), ("compiled", fast)):
            engine = ModelEngine(lm.model)
            engine.start(torch.tensor([PROMPT]), capacity=64)
            out[name] = engine.forward([tree]).logits[0]
            engine.keep([[0, 2]])
            out[name + "_next"] = engine.forward([Block.chain([7, 3])]).logits[0]
            assert engine.lengths == [len(PROMPT) + 2]
            engine.close()
    assert out["compiled"].shape == out["eager"].shape == (3, 96)
    torch.testing.assert_close(out["compiled"], out["eager"], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(out["compiled_next"], out["eager_next"], rtol=1e-4, atol=1e-4)


def test_outgrowing_the_fixed_cache_mid_request_moves_the_rows_and_goes_on_eagerly(pair) -> None:
    """A step that would write past the fixed cache's end copies the rows into a cache of their own: the
    scores stay the eager engine's and the compiled forward is free again."""
    eager, fast = pair
    runner = compiled(fast.model)
    engines = [ModelEngine(lm.model) for lm in (eager, fast)]
    with torch.inference_mode():
        for engine in engines:
            engine.start(torch.tensor([PROMPT]), capacity=64)
        assert engines[1].ran == "compiled"
        for step in range(8):  # 33 + 8 x 30 tokens > 256 slots
            block = Block.chain([(7 * step + i) % 96 for i in range(30)])
            a, b = (engine.forward([block]).logits[0] for engine in engines)
            torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-4)
            for engine in engines:
                engine.keep([list(range(30))])
        assert engines[1].ran.startswith("eager (outgrew")
        assert engines[0].lengths == engines[1].lengths == [len(PROMPT) + 240]
        assert runner.acquire() is not None  # released when the rows left
        runner.release()
        for engine in engines:
            engine.close()


def test_request_larger_than_the_fixed_cache_runs_eagerly(pair) -> None:
    eager, fast = pair
    ref = build_decoder("ar", eager).generate(PROMPT, greedy_config(240)).tokens  # 33 + 240 + 32 > 256
    out = build_decoder("pld", fast).generate(PROMPT, greedy_config(240))
    assert out.tokens == ref
    assert out.stats.extras["forward"].startswith("eager (needs")


def test_busy_compiled_forward_lets_the_next_request_run_eagerly(pair) -> None:
    eager, fast = pair
    runner = compiled(fast.model)
    ref = build_decoder("ar", eager).generate(PROMPT, greedy_config(12)).tokens
    assert runner.acquire() is not None  # another request holds the fixed cache
    try:
        out = build_decoder("ar", fast).generate(PROMPT, greedy_config(12))
    finally:
        runner.release()
    assert out.tokens == ref
    assert out.stats.extras["forward"] == "eager (the compiled forward was busy with another request)"
    again = build_decoder("ar", fast).generate(PROMPT, greedy_config(12))
    assert again.stats.extras["forward"] == "compiled"  # released after each request


def test_compile_failure_falls_back_in_one_line(capsys) -> None:
    eager, broken = make_tiny("llama", vocab=96, seed=SEED), make_tiny("llama", vocab=96, seed=SEED)
    runner = compile_forward(broken.model, capacity=256, mode=None)

    def fail(*_args, **_kwargs):
        raise RuntimeError("C++ compile error: no compiler\nlong trace")

    runner._fn = fail
    ref = build_decoder("ar", eager).generate(PROMPT, greedy_config(10)).tokens
    out = build_decoder("pld", broken).generate(PROMPT, greedy_config(10))
    assert out.tokens == ref
    assert (
        out.stats.extras["forward"]
        == "eager (compiling failed: RuntimeError: C++ compile error: no compiler)"
    )
    lines = [ln for ln in capsys.readouterr().err.splitlines() if "compiling failed" in ln]
    assert lines == [
        "[fastforward] --compile: compiling failed (RuntimeError: C++ compile error: no compiler); "
        "decoding eagerly instead"
    ]


@pytest.mark.slow
def test_compiled_smollm2_equals_eager_ar(smollm2, real_prompts) -> None:
    """Real SmolLM2 through the max-autotune graphs, as ``--compile on`` builds them on a CPU: AOTInductor
    packages in the cache directory (minutes to build on 2 cores the first time, loaded after): AR and the
    lossless methods with their default schedules equal eager greedy AR."""
    from fastforward.models.cache import compiled_dir

    ref = {
        i: build_decoder("ar", smollm2).generate(p, greedy_config(32)).tokens
        for i, p in enumerate(real_prompts[:2])
    }
    runner = compile_forward(smollm2.model, capacity=1024, store=compiled_dir())
    try:
        for method in ("ar", "pld", "lookahead", "jacobi"):
            for i, p in enumerate(real_prompts[:2]):
                out = build_decoder(method, smollm2).generate(p, greedy_config(32))
                assert out.tokens == ref[i], (method, i)
                assert out.stats.extras["forward"] == "compiled"
        assert runner.failed is None
    finally:
        del smollm2.model.fastforward_compiled


def test_compile_auto_compiles_where_it_repays_itself(capsys) -> None:
    import argparse

    from fastforward.cli.common import compile_choice, compile_pays

    assert compile_pays("cuda:0", "generate")[0] and compile_pays("cpu", "serve")[0]
    assert not compile_pays("cpu", "generate")[0] and not compile_pays("cpu", "bench")[0]
    args = argparse.Namespace(compile="auto", device="cpu", command="generate")
    assert compile_choice(args) == "off" and args.compile == "off"
    assert "--compile auto: off" in capsys.readouterr().err
    assert compile_choice(argparse.Namespace(compile="on", device="cpu", command="generate")) == "on"


def test_a_batch_of_one_runs_the_compiled_forward_and_gives_it_back(pair) -> None:
    """The server's one path at its default batch size 1: each request is a batch of one row, prefilled as
    batch 1 is (the compiled forward's fixed cache), and the cache goes back when the row leaves, so the
    next request compiles nothing and runs compiled too."""
    from fastforward.core.batching import batched

    eager, fast = pair
    ref = build_decoder("ar", eager).generate(PROMPT, greedy_config(12)).tokens
    bd = batched(build_decoder("pld", fast), max_batch_size=1)
    reqs = bd.generate_many([PROMPT, PROMPT[5:]], greedy_config(12))
    assert reqs[0].result.tokens == ref
    assert reqs[1].result.tokens == build_decoder("ar", eager).generate(PROMPT[5:], greedy_config(12)).tokens
    assert [r.result.stats.extras["forward"] for r in reqs] == ["compiled", "compiled"]
    assert compiled(fast.model).acquire() is not None  # free again
    compiled(fast.model).release()


# pld held to one-token drafts: AR steps and 2-token verifies, two buckets to build (each costs a compile)
TWO_BUCKETS = {"gamma": 1, "gamma_auto": False}


def test_compiled_forwards_are_kept_on_disk_and_loaded_by_the_next_run(tmp_path, capsys) -> None:
    """With a store (``--compile on`` on a CPU) every bucket a request uses becomes an AOTInductor package
    on disk; a second compiled forward over the same weights (as a later process has) loads those packages
    and builds nothing; a package that no longer loads (a truncated file) is built again, once. Every run
    gives eager AR's tokens through the padded buckets."""
    eager = make_tiny("llama", vocab=96, seed=SEED)
    ref = build_decoder("ar", eager).generate(PROMPT, greedy_config(24)).tokens
    runs = []
    for attempt in range(3):
        if attempt == 2:  # a package cut short on disk
            (one,) = tmp_path.glob("*/k1-s256.pt2")
            one.write_bytes(one.read_bytes()[:1000])
        fast = make_tiny("llama", vocab=96, seed=SEED)
        runner = compile_forward(fast.model, capacity=256, mode=None, store=tmp_path)
        out = build_decoder("pld", fast, None, TWO_BUCKETS).generate(PROMPT, greedy_config(24))
        assert out.tokens == ref and out.stats.extras["forward"] == "compiled" and runner.failed is None
        runs.append(runner.startup)
    built, loaded, repaired = runs
    assert len(built) > 1 and all("built_s" in t for t in built.values())  # several buckets, each built once
    assert loaded.keys() == built.keys() and not any("built_s" in t for t in loaded.values())
    assert [name for name, t in repaired.items() if "built_s" in t] == ["k1-s256"]
    assert "does not load" in capsys.readouterr().err
    (folder,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert sorted(p.name for p in folder.glob("k*.pt2")) == sorted(f"{name}.pt2" for name in built)


def test_the_buckets_of_a_float32_model_share_one_copy_of_its_weights(tmp_path) -> None:
    """A float32 model's packages keep their weights beside their libraries, and every bucket loaded in a
    process runs on the same weight tensors (one copy in memory and in the CPU's caches, whichever width
    runs), with eager AR's tokens; a second process-like forward over the same store shares them too."""
    from fastforward.core import aot

    eager = make_tiny("llama", vocab=96, seed=SEED)
    ref = build_decoder("ar", eager).generate(PROMPT, greedy_config(24)).tokens
    pools, runners = [], []  # both forwards kept alive: the pool holds a weight while a package uses it
    for _ in range(2):
        fast = make_tiny("llama", vocab=96, seed=SEED)
        runner = compile_forward(fast.model, capacity=256, mode=None, store=tmp_path)
        runners.append(runner)
        assert build_decoder("pld", fast, None, TWO_BUCKETS).generate(PROMPT, greedy_config(24)).tokens == ref
        loaded = [run for run in runner._packages.values() if run is not None]
        assert len(loaded) > 1 and all(isinstance(run, aot.SharedPackage) for run in loaded)
        storages = [{t.untyped_storage().data_ptr() for t in run._weights} for run in loaded]
        assert all(s == storages[0] for s in storages)  # not merely equal values: the same memory
        pools.append(storages[0])
    assert pools[0] == pools[1]
    assert all(aot.weights_apart(p) for p in tmp_path.glob("*/k*.pt2"))


def test_float32_weights_too_large_for_the_cpu_s_cache_get_a_copy_per_bucket(tmp_path, monkeypatch) -> None:
    """Where the last-level cache holds less than half the weights, sharing saves nothing (every step streams
    them from memory) and costs inductor's GEMM templates, so each package keeps its own laid-out copy; the
    tokens stay eager AR's. The rule itself: SmolLM2's 0.54 GB shares on a 480 MB L3, not on a 32 MB one."""
    from fastforward.core import aot
    from fastforward.core.compiled import shares_weights, weights_stay_cached

    smollm2, mb = 538_000_000, 1 << 20
    assert weights_stay_cached(smollm2, 480 * mb) and not weights_stay_cached(smollm2, 32 * mb)
    assert weights_stay_cached(smollm2, None)  # a cache of unknown size: as before, one shared copy
    eager, fast = make_tiny("llama", vocab=96, seed=SEED), make_tiny("llama", vocab=96, seed=SEED)
    assert shares_weights(fast.model)  # a tiny model fits any cache
    monkeypatch.setattr("fastforward.hardware.last_level_cache_bytes", lambda: 1024)
    assert not shares_weights(fast.model)
    ref = build_decoder("pld", eager, None, TWO_BUCKETS).generate(PROMPT, greedy_config(24)).tokens
    runner = compile_forward(fast.model, capacity=256, mode=None, store=tmp_path)
    assert build_decoder("pld", fast, None, TWO_BUCKETS).generate(PROMPT, greedy_config(24)).tokens == ref
    loaded = [run for run in runner._packages.values() if run is not None]
    assert len(loaded) > 1 and not any(isinstance(run, aot.SharedPackage) for run in loaded)
    assert not any(aot.weights_apart(p) for p in tmp_path.glob("*/k*.pt2"))


def test_the_last_level_cache_is_read_from_sysfs(tmp_path) -> None:
    """The highest data cache level's size, as Linux writes it; None where the system says nothing."""
    from fastforward.hardware import last_level_cache_bytes, parse_cache_size

    for i, (level, kind, size) in enumerate([(1, "Data", "32K"), (1, "Instruction", "32K"), (2, "Unified", "1024K"),
                                             (3, "Unified", "32768K")]):  # fmt: skip
        d = tmp_path / f"index{i}"
        d.mkdir()
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
    assert last_level_cache_bytes(tmp_path) == 32 << 20
    assert last_level_cache_bytes(tmp_path / "absent") is None
    assert parse_cache_size("480M") == 480 << 20 and parse_cache_size("1G") == 1 << 30
    assert parse_cache_size("512") == 512 and parse_cache_size("n/a") is None


def test_a_loaded_package_leaves_no_unpacked_copy_on_disk(tmp_path, monkeypatch) -> None:
    """AOTInductor unpacks a package into a folder under TMPDIR to load it; that folder is gone once the
    load returns (it would otherwise hold a copy of the package for the process's life, and for good if the
    process is killed), and the loaded package still gives eager AR's tokens."""
    from fastforward.core import aot

    eager, fast = make_tiny("llama", vocab=96, seed=SEED), make_tiny("llama", vocab=96, seed=SEED)
    compile_forward(fast.model, capacity=256, mode=None, store=tmp_path / "store")
    ref = build_decoder("ar", eager).generate(PROMPT, greedy_config(12)).tokens
    assert build_decoder("ar", fast).generate(PROMPT, greedy_config(12)).tokens == ref  # builds k1
    (package,) = (tmp_path / "store").glob("*/k1-s256.pt2")
    seen: list[Path] = []
    real = torch._C._aoti.AOTIModelPackageLoader  # what every way of loading a package goes through

    class Spy:  # the loader's class, recording where each construction unpacked its package
        def __call__(self, *args: object) -> object:
            out = real(*args)
            seen.extend(Path(os.environ["TMPDIR"]).glob("aotinductor_*"))
            return out

        def __getattr__(self, name: str) -> object:
            return getattr(real, name)

    monkeypatch.setattr(torch._C._aoti, "AOTIModelPackageLoader", Spy())
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    again = make_tiny("llama", vocab=96, seed=SEED)
    runner = compile_forward(again.model, capacity=256, mode=None, store=tmp_path / "store")
    out = build_decoder("ar", again).generate(PROMPT, greedy_config(12))
    assert runner.startup["k1-s256"].keys() == {"loaded_s"} and out.tokens == ref
    assert seen and not any(p.exists() for p in seen)
    assert os.environ["TMPDIR"] == str(tmp_path) and not list(tmp_path.glob("aotinductor_*"))
    assert aot.load(package) is not None and not list(tmp_path.glob("**/aotinductor_*"))


def test_a_packaged_forward_gives_the_hidden_states_too(tmp_path) -> None:
    """Chimera's forwards ask for the last layer's hidden states: the package built for them returns the
    same logits and states as the eager forward over the same cache."""
    eager, fast = make_tiny("llama", vocab=96, seed=SEED), make_tiny("llama", vocab=96, seed=SEED)
    runner = compile_forward(fast.model, capacity=256, mode=None, store=tmp_path)
    got = []
    with torch.inference_mode():
        for lm in (eager, fast):
            engine = ModelEngine(lm.model)
            engine.start(torch.tensor([PROMPT]), hidden=True, capacity=64)
            got.append(engine.forward([Block.chain([7, 8, 9])], hidden=True))
            engine.close()
    (ref, out) = got
    assert runner.startup and all(name.startswith("k4-hidden") for name in runner.startup)
    assert torch.allclose(out.logits[0], ref.logits[0], atol=1e-4)
    assert out.hidden is not None and ref.hidden is not None
    assert torch.allclose(out.hidden[0], ref.hidden[0], atol=1e-4)


def test_a_package_is_never_loaded_for_other_weights_or_another_dtype(monkeypatch) -> None:
    from fastforward.core.aot import fingerprint

    a, b = make_tiny("llama", vocab=96, seed=SEED), make_tiny("llama", vocab=96, seed=SEED)
    assert fingerprint(a.model) == fingerprint(b.model)
    embed = b.model.get_input_embeddings().weight
    with torch.no_grad():
        embed[70, 5] += 1e-3  # one weight, anywhere in the tensor
    assert fingerprint(a.model) != fingerprint(b.model)
    assert fingerprint(a.model, True) != fingerprint(a.model, False)  # max-autotune or not
    assert fingerprint(a.model) != fingerprint(a.model.to(torch.bfloat16))
    assert fingerprint(make_tiny("qwen2", vocab=96, seed=SEED).model) != fingerprint(a.model)
    here = fingerprint(a.model)
    # the same CPU under another ISA cap (AVX2, or AVX where this process already runs under the AVX2 cap, as
    # a CI run on an AVX-512 machine may): other code
    other = "AVX" if os.environ.get("ONEDNN_MAX_CPU_ISA", "").upper() == "AVX2" else "AVX2"
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", other)
    assert fingerprint(a.model) != here


def test_a_change_to_our_layers_inside_the_model_gives_new_packages(monkeypatch) -> None:
    """The forward of an int8 linear of ours is traced into the package like the engine's own code: a change
    to its source must not load the packages built from the old one."""
    import inspect

    from fastforward.core import aot
    from fastforward.models.quantize import quantized_copy

    q = quantized_copy(make_tiny("llama", vocab=96, seed=SEED).model, 8)
    assert "fastforward.models.quantize" in aot.traced_modules(q)
    assert "fastforward.models.quantize" not in aot.traced_modules(
        make_tiny("llama", vocab=96, seed=SEED).model
    )
    before = aot.fingerprint(q)
    source = inspect.getsource

    def edited(obj):
        text = source(obj)
        return text + "# edited" if getattr(obj, "__name__", "") == "fastforward.models.quantize" else text

    monkeypatch.setattr(inspect, "getsource", edited)
    assert aot.fingerprint(q) != before


def test_a_package_that_fails_to_build_compiles_in_process_instead(tmp_path, monkeypatch, capsys) -> None:
    """Exporting or compiling a package can fail where ``torch.compile`` in process does not (it needs the
    forward as one graph): that bucket then compiles in process, said in one line, and no half-written
    package is left to load later."""

    def fail(program, package_path, **_kwargs):
        Path(package_path).write_bytes(b"half a package")
        raise RuntimeError("C++ compile error: no compiler\nlong trace")

    monkeypatch.setattr(torch._inductor, "aoti_compile_and_package", fail)
    eager, fast = make_tiny("llama", vocab=96, seed=SEED), make_tiny("llama", vocab=96, seed=SEED)
    runner = compile_forward(fast.model, capacity=256, mode=None, store=tmp_path)
    out = build_decoder("ar", fast).generate(PROMPT, greedy_config(10))
    assert out.tokens == build_decoder("ar", eager).generate(PROMPT, greedy_config(10)).tokens
    assert out.stats.extras["forward"] == "compiled" and runner.failed is None and not runner.startup
    lines = [ln for ln in capsys.readouterr().err.splitlines() if "failed" in ln]
    assert lines == [
        "[fastforward] --compile: packaging the 1-token forward over 256 cache slots failed (RuntimeError: "
        "C++ compile error: no compiler); compiling it in this process instead"
    ]
    assert not list(tmp_path.rglob("*.pt2"))


def test_ar_eager_is_the_eager_reference_beside_compiled_ar(pair) -> None:
    """``ar_eager`` decodes the compiled model's weights without its compiled forward, so a ``--compile on``
    bench times eager and compiled AR side by side; it joins ``all`` only where there is a compiled forward."""
    from fastforward.decoders.registry import build_decoders

    eager, fast = pair
    ref = build_decoder("ar", eager).generate(PROMPT, greedy_config(12)).tokens
    decoders = build_decoders("all", fast, None, {})
    assert "ar_eager" in decoders and "ar_eager" not in build_decoders("all", eager, None, {})
    out = decoders["ar_eager"].generate(PROMPT, greedy_config(12))
    assert out.tokens == ref and out.stats.extras["forward"] == "eager"
    assert decoders["ar"].generate(PROMPT, greedy_config(12)).stats.extras["forward"] == "compiled"


def test_ar_eager_stays_eager_as_a_batch_of_one(pair) -> None:
    """The server's and ``--batch-size 1``'s path: ``ar_eager`` rows stay off the compiled forward there too,
    under their own name."""
    from fastforward.core.batching import batched

    eager, fast = pair
    bd = batched(build_decoder("ar_eager", fast), max_batch_size=1)
    (req,) = bd.generate_many([PROMPT], greedy_config(12))
    assert req.result.tokens == build_decoder("ar", eager).generate(PROMPT, greedy_config(12)).tokens
    assert req.result.stats.extras["forward"] == "eager" and bd.name == "ar_eager"


def test_a_compiled_model_s_cost_curve_is_its_graphs_staircase(tmp_path, monkeypatch) -> None:
    """The cost curve tree sizers read (:mod:`fastforward.models.costs`) is measured through the compiled
    bucket graphs when the model has them and filed apart from the eager curve; between buckets it is a
    staircase (k=5 runs, and costs, k=8's padded graph), not a line."""
    from fastforward.models import costs

    monkeypatch.setenv("FASTFORWARD_CACHE", str(tmp_path))
    fast = make_tiny("llama", vocab=96, seed=SEED)
    runner = compile_forward(fast.model, capacity=256, mode=None)
    curve = costs.cached_curve(fast, ks=(1, 4, 8), context=16, repeats=1)
    assert {r["engine"] for r in curve} == {runner.identity()} and runner.identity().startswith("compiled")
    assert {1, 4, 8} <= runner.used  # timed through the graphs, not eagerly
    filed = costs.cache_file("tiny-llama", "float32", "default", 16, runner.identity())
    assert filed.exists() and not costs.cache_file("tiny-llama", "float32", "default", 16).exists()
    ms = costs.interpolate(curve)
    k4, k8 = curve[1]["ms"], curve[2]["ms"]
    assert ms(5) == ms(7) == ms(8) == k8 and ms(3) == k4
    eager_line = costs.interpolate([{k: v for k, v in r.items() if k != "engine"} for r in curve])
    assert eager_line(5) == pytest.approx(k4 + (k8 - k4) / 4)


@pytest.mark.parametrize("heads", [(6, 2), (4, 4), (3, 1)])
@pytest.mark.parametrize("mask_kind", ["bool", "additive", "per_head"])
def test_grouped_attention_equals_sdpa(heads, mask_kind) -> None:
    """The decoding-width attention of compiled CPU graphs gives SDPA's result: grouped query heads, a
    boolean or additive mask, one mask for every head or one per query head."""
    from fastforward.core.compiled import grouped_attention

    hq, hkv = heads
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, hq, 5, 8, generator=g)
    k, v = (torch.randn(2, hkv, 12, 8, generator=g) for _ in range(2))
    allowed = torch.rand(2, hq if mask_kind == "per_head" else 1, 5, 12, generator=g) > 0.4
    allowed[..., 0] = True  # every query attends somewhere
    mask = allowed if mask_kind != "additive" else torch.zeros(allowed.shape).masked_fill(~allowed, -1e30)
    ref = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, enable_gqa=True, scale=0.3
    )
    out = grouped_attention(q, k, v, mask, 0.3)
    assert out.shape == ref.shape and torch.allclose(out, ref, atol=1e-5)


@pytest.mark.parametrize("kv_heads", [2, 6])
@pytest.mark.parametrize("width", [12, 40])
def test_a_mask_narrower_than_the_cache_reads_only_the_slots_it_covers(width, kv_heads) -> None:
    """An eager prefill over the fixed cache masks only the slots filled so far: :func:`gqa_sdpa` then
    attends over those slots alone (the decoding-width attention, SDPA, or transformers' own function for
    a model without grouped heads), with the result of the full cache and a mask that hides the rest."""
    from fastforward.core.compiled import gqa_sdpa

    g = torch.Generator().manual_seed(0)
    module = torch.nn.Module()
    module.training = False
    module.num_key_value_groups = 6 // kv_heads
    q = torch.randn(1, 6, width, 8, generator=g)
    k, v = (torch.randn(1, kv_heads, 64, 8, generator=g) for _ in range(2))
    filled = width + 3
    narrow = torch.ones(1, 1, width, filled, dtype=torch.bool).tril(filled - width)
    wide = torch.zeros(1, 1, width, 64, dtype=torch.bool)
    wide[..., :filled] = narrow
    k_junk, v_junk = k.clone(), v.clone()
    k_junk[:, :, filled:], v_junk[:, :, filled:] = float("nan"), float("nan")  # never read
    got, _ = gqa_sdpa(module, q, k_junk, v_junk, narrow, scaling=0.3)
    want, _ = gqa_sdpa(module, q, k, v, wide, scaling=0.3)
    assert not got.isnan().any()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_gemm_backends_give_bf16_gemms_to_the_templates_only_where_amx_runs(monkeypatch) -> None:
    """bf16 GEMMs (int8 weights' too): inductor's templates (AMX micro-kernels) on an AMX CPU, oneDNN
    elsewhere, for int4 weights, and under an ISA cap, which must see the CPU as the capped kind would; on
    AVX-512 without AMX the templates for buckets of 1-4 tokens, ATen from 8."""
    from fastforward.core.compiled import amx_usable, gemm_backends

    assert gemm_backends(torch.bfloat16, amx=False) == "ATEN"
    assert gemm_backends(torch.bfloat16, amx=True) == "CPP"
    assert gemm_backends(torch.bfloat16, amx=True, int4=True) == "ATEN"
    assert gemm_backends(torch.float16, amx=True) == "ATEN"
    assert "CPP" in gemm_backends(torch.float32, amx=False)
    # AVX-512 with bf16, without AMX: the templates for buckets of 1-4 tokens, ATen from 8
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    monkeypatch.setattr("fastforward.hardware.cpu_flags", lambda: {"avx512f", "avx512_bf16"})
    assert [gemm_backends(torch.bfloat16, amx=False, width=w) for w in (1, 4, 8, None)] == [
        "CPP", "CPP", "ATEN", "ATEN",
    ]  # fmt: skip
    assert gemm_backends(torch.bfloat16, amx=False, int4=True, width=1) == "ATEN"
    assert gemm_backends(torch.float16, amx=False, width=1) == "ATEN"
    monkeypatch.setattr("fastforward.hardware.cpu_flags", lambda: {"avx512f"})  # no bf16: not measured there
    assert gemm_backends(torch.bfloat16, amx=False, width=1) == "ATEN"
    monkeypatch.setattr("fastforward.hardware.cpu_flags", lambda: {"avx512f", "avx512_bf16"})
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    assert gemm_backends(torch.bfloat16, amx=False, width=1) == "ATEN"
    # float32 packages: the templates up to 8 tokens, wider ones too under AVX2, oneDNN's linear with AVX-512
    # unless inductor builds through the g++ front (core.cxx), and then the templates to 32 tokens; int8
    # weights and graphs compiled in process (width None) keep inductor's default
    from fastforward.core import cxx

    monkeypatch.setattr(cxx, "chosen", lambda: None)
    assert [gemm_backends(torch.float32, width=w) for w in (1, 8, 16, 32)] == ["CPP"] * 4
    assert gemm_backends(torch.float32, width=None) == "ATEN,TRITON,CPP"
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    assert [gemm_backends(torch.float32, width=w) for w in (1, 8, 16, 32)] == ["CPP", "CPP", "ATEN", "ATEN"]
    monkeypatch.setattr(cxx, "chosen", lambda: "/cache/fastforward-g++-0123456789ab")
    assert [gemm_backends(torch.float32, width=w) for w in (1, 8, 16, 32, 64)] == ["CPP"] * 4 + ["ATEN"]
    assert gemm_backends(torch.float32, width=1, quantized=True) == "ATEN,TRITON,CPP"
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "DEFAULT")
    assert gemm_backends(torch.float32, width=1) == "ATEN,TRITON,CPP"
    monkeypatch.undo()
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")  # the cap removes avx512_bf16 from the usable flags
    assert not amx_usable() and gemm_backends(torch.bfloat16) == "ATEN"
    assert gemm_backends(torch.bfloat16, width=1) == "ATEN"


def test_each_package_is_built_with_the_gemm_backends_of_its_width(tmp_path, monkeypatch) -> None:
    """The per-width rule reaches the build: a bf16 model's 1- and 4-token packages on the templates, its
    8-token one on ATen, on an AVX-512 CPU with bf16 and no AMX."""
    from fastforward.core import aot

    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    monkeypatch.setattr("fastforward.hardware.cpu_flags", lambda: {"avx512f", "avx512_bf16"})
    fast = make_tiny("llama", vocab=96, seed=SEED)
    fast.model.to(torch.bfloat16)
    runner = compile_forward(fast.model, capacity=256, mode=None, store=tmp_path)
    seen: dict[int, str] = {}

    def build(model, step, example, hidden, path, autotune, gemm, **kwargs) -> None:
        seen[int(example[0].shape[-1])] = gemm

    monkeypatch.setattr(aot, "build", build)
    for k in (1, 4, 8):
        example = (torch.zeros(1, k, dtype=torch.long),)
        runner._build(example, False, tmp_path / f"k{k}.pt2", f"the {k}-token forward")
    assert seen == {1: "CPP", 4: "CPP", 8: "ATEN"}


def test_a_build_on_the_templates_alone_that_fails_is_built_again_with_inductor_s_backends(
    tmp_path, monkeypatch, capsys
) -> None:
    """A float32 package on the templates alone whose build fails (a shape they do not take: no kernel at
    all without ATen) is built again with inductor's default backends, said in one line; a build that had
    ATen among its backends, or one that autotunes nothing, fails as it did."""
    from fastforward.core import aot, cxx
    from fastforward.core.compiled import INDUCTOR_GEMMS

    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    monkeypatch.setattr(cxx, "chosen", lambda: None)  # without the g++ front: 16 tokens on ATen alone
    fast = make_tiny("llama", vocab=96, seed=SEED)
    runner = compile_forward(fast.model, capacity=256, mode="max-autotune", store=tmp_path)
    runner.shared_weights = False
    tried: list[str] = []

    def build(model, step, example, hidden, path, autotune, gemm, **kwargs) -> None:
        tried.append(gemm)
        if "ATEN" not in gemm.split(",") or (len(tried) > 2 and gemm == "ATEN"):
            raise RuntimeError("NoValidChoicesError: No choices exist for backend.")

    monkeypatch.setattr(aot, "build", build)
    runner._build((torch.zeros(1, 1, dtype=torch.long),), False, tmp_path / "k1.pt2", "the 1-token forward")
    assert tried == ["CPP", INDUCTOR_GEMMS]
    line = capsys.readouterr().err.strip()
    assert "could not be built on the CPP GEMMs alone" in line and "\n" not in line
    with pytest.raises(RuntimeError):  # the 16-token package is on ATen: nothing else to try
        runner._build((torch.zeros(1, 16, dtype=torch.long),), False, tmp_path / "k16.pt2", "16 tokens")
    assert tried[2:] == ["ATEN"]
    runner._autotune = False  # without autotuning the backends are not what failed
    with pytest.raises(RuntimeError):
        runner._build((torch.zeros(1, 1, dtype=torch.long),), False, tmp_path / "k1.pt2", "1 token")
    assert tried[3:] == ["CPP"]


def test_building_a_package_leaves_no_copy_of_its_library_in_inductor_s_cache(tmp_path) -> None:
    """A package's library (its weights inside) lives in the package only: the copy the build compiled in
    inductor's cache directory is deleted once the package is written."""
    import zipfile

    from torch._inductor.runtime.cache_dir_utils import cache_dir

    fast = make_tiny("llama", vocab=96, seed=SEED)
    compile_forward(fast.model, capacity=256, mode=None, store=tmp_path)
    build_decoder("ar", fast).generate(PROMPT, greedy_config(4))
    (package,) = tmp_path.glob("*/k1-s256.pt2")
    with zipfile.ZipFile(package) as z:
        libraries = [Path(n).name for n in z.namelist() if n.endswith(".so")]
    assert libraries
    assert not [f for name in libraries for f in Path(cache_dir()).glob(f"*/{name}")]


def test_a_compiled_draft_feeds_as_the_eager_one_does() -> None:
    """:meth:`ModelEngine.feed` on a compiled draft: the prompt (a fixed-cache prefill), one token (the
    1-token graph), three (one by one through it) and seven (one eager forward on the same cache) give the
    logits the eager draft gives, and only the 1-token graph ever compiles."""
    eager, fast = make_tiny("llama", vocab=96, seed=SEED), make_tiny("llama", vocab=96, seed=SEED)
    runner = compile_forward(fast.model, capacity=512, mode=None)  # the prompt + DRAFT_ROOM + a bucket
    ref, out = ModelEngine(eager.model, widths=(1,)), ModelEngine(fast.model, widths=(1,))
    with torch.inference_mode():
        for feed in (PROMPT, [4], [9, 10, 11], [20, 21, 22, 23, 24, 25, 26]):
            torch.testing.assert_close(out.feed(feed), ref.feed(feed), rtol=1e-4, atol=1e-4)
    assert out.ran == "compiled" and runner.used == {1} and out.lengths == ref.lengths
    out.close()


@pytest.mark.parametrize(
    "method, options",
    [
        ("layerskip", {"gamma_auto": False, "layers": 1}),  # the target's first layer drafts
        ("sd", {"gamma_auto": False, "lookup_first": True}),  # long catch-ups after lookup chains
    ],
)
def test_drafts_of_a_compiled_target_run_compiled_and_keep_tokens(pair, method, options) -> None:
    eager, fast = pair
    draft = make_tiny("llama", vocab=96, seed=SEED + 1) if method == "sd" else None
    ref = build_decoder("ar", eager).generate(PROMPT, greedy_config(40)).tokens
    decoder = build_decoder(method, fast, draft, options)
    (model,) = draft_models(decoder.drafter)
    assert compiled(model) is not None  # compiled because the target is
    for _ in range(2):  # the draft's fixed cache is given back after each request
        out = decoder.generate(PROMPT, greedy_config(40))
        assert out.tokens == ref
        assert out.stats.extras["draft_forward"] == "compiled" and out.stats.extras["forward"] == "compiled"
    assert compiled(model).used == {1}


def test_a_draft_that_never_ran_says_nothing_of_what_ran_it(pair) -> None:
    """A request whose draft stayed off (gamma_auto found no draft length that pays) reports no
    draft_forward, rather than the "eager" of an engine that never started; one that drafted says what ran."""
    from fastforward.core.decoder import SamplingConfig
    from fastforward.decoders.speculative.drafters import DraftContext

    _, fast = pair
    # the model drafter alone: a lookup chain (the default lookup_first) would run no draft forward
    drafter = build_decoder("layerskip", fast, None, {"layers": 1, "lookup_first": False}).drafter
    drafter.reset()
    assert drafter.finish() == {}
    drafter.reset()
    with torch.inference_mode():
        drafter.propose(DraftContext(PROMPT, 2, SamplingConfig(), None, room=16))
    assert drafter.finish() == {"draft_forward": "compiled"}


def test_a_batch_drafts_eagerly_beside_the_compiled_target(pair) -> None:
    """A batch's rows draft side by side on the draft's own batched cache: eager, since a compiled draft's
    fixed cache serves one row; the tokens are still AR's."""
    from fastforward.core.batching import batched

    eager, fast = pair
    ref = build_decoder("ar", eager).generate(PROMPT, greedy_config(16)).tokens
    decoder = build_decoder("layerskip", fast, None, {"gamma_auto": False, "layers": 1})
    (model,) = draft_models(decoder.drafter)
    for req in batched(decoder, max_batch_size=2).generate_many([PROMPT, PROMPT], greedy_config(16)):
        assert req.result.tokens == ref
    assert not compiled(model).used


def test_qsd_drafts_on_the_compiled_target_s_own_cache(pair) -> None:
    """A qsd copy quantized from the compiled target drafts through its own compiled 1-token graph on the
    target's fixed cache (every layer, the same objects), so it never prefills the prompt: AR's tokens,
    request after request."""
    eager, fast = pair
    ref = build_decoder("ar", eager).generate(PROMPT, greedy_config(40)).tokens
    decoder = build_decoder("qsd", fast, None, {"gamma_auto": False, "bits": 8})
    (qcopy,) = draft_models(decoder.drafter)
    for _ in range(2):
        out = decoder.generate(PROMPT, greedy_config(40))
        assert out.tokens == ref and out.stats.extras["spec_accepted"] > 0
        assert out.stats.extras["draft_forward"] == "compiled"
    assert compiled(qcopy).cache.layers[0] is compiled(fast.model).cache.layers[0]
    assert compiled(qcopy).used == {1}


def test_layerskip_drafts_on_the_compiled_target_s_own_cache(pair) -> None:
    """A layer-skip draft is the target's first layers: it drafts through its compiled 1-token graph on a view
    of the target's fixed cache (the same layer objects) and rolls the length back, so the target's next
    forward finds its cache as it left it: the tokens are AR's, request after request."""
    eager, fast = pair
    ref = build_decoder("ar", eager).generate(PROMPT, greedy_config(40)).tokens
    decoder = build_decoder("layerskip", fast, None, {"gamma_auto": False, "layers": 1})
    (view,) = draft_models(decoder.drafter)
    for _ in range(2):
        out = decoder.generate(PROMPT, greedy_config(40))
        assert out.tokens == ref and out.stats.extras["spec_proposed"] > 0
        assert out.stats.extras["draft_forward"] == "compiled"
    assert compiled(view).cache.layers[0] is compiled(fast.model).cache.layers[0]
    assert compiled(view).used == {1}


def test_the_store_loses_its_least_recently_used_folders_first_and_never_a_live_one() -> None:
    """:func:`fastforward.core.aot.to_trim`: oldest first until the rest fit; a folder this process uses,
    or one used in the last ten minutes (another process may run it), stays even when it alone is over."""
    from fastforward.core.aot import RECENT_S, to_trim

    now = 1e6
    old = now - 10 * RECENT_S
    folders = [("a", 5, old + 3), ("b", 4, old + 1), ("c", 3, old + 2), ("live", 6, old), ("recent", 2, now)]
    assert to_trim(folders, 20, now, keep=set()) == []  # fits
    assert to_trim(folders, 13, now, keep={"live"}) == ["b", "c"]  # 20 -> 16 -> 13: a stays
    assert to_trim(folders, 14, now, keep=set()) == ["live"]  # the oldest, when nothing keeps it
    assert to_trim(folders, 0, now, keep={"live"}) == ["b", "c", "a"]  # recent and live stay whatever


def test_a_build_trims_the_store_to_its_bound_and_keeps_what_it_uses(tmp_path, monkeypatch, capsys) -> None:
    """Each change of code, model or torch gives a new fingerprint folder and the old ones are never read
    again (47 GB of them once filled a disk): after a build, folders not used for a while go, least recently
    used first, until the store fits ``FASTFORWARD_COMPILED_GB``; the new packages stay and still load."""
    from fastforward.core import aot, memory

    stale = []
    for i, age in enumerate((7200, 3600)):  # two folders of earlier code, last used 2 h and 1 h ago
        folder = tmp_path / f"old{i}"
        folder.mkdir()
        (folder / "k1-s256.pt2").write_bytes(b"x" * 400_000)
        (folder / aot.USED).touch()
        os.utime(folder / aot.USED, (os.path.getmtime(folder) - age,) * 2)
        stale.append(folder)
    monkeypatch.setenv(memory.STORE_GB_ENV, "0.0006")  # 600 kB: room for one of them, not for both
    eager = make_tiny("llama", vocab=96, seed=SEED)
    ref = build_decoder("ar", eager).generate(PROMPT, greedy_config(4)).tokens
    fast = make_tiny("llama", vocab=96, seed=SEED)
    compile_forward(fast.model, capacity=256, mode=None, store=tmp_path)
    assert build_decoder("ar", fast).generate(PROMPT, greedy_config(4)).tokens == ref
    assert not stale[0].exists() and not stale[1].exists()  # the new packages alone are over 600 kB
    (kept,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert list(kept.glob("k1-s256.pt2")) and "least recently used" in capsys.readouterr().err
    monkeypatch.setenv(memory.STORE_GB_ENV, "lots")
    with pytest.raises(ValueError, match="FASTFORWARD_COMPILED_GB"):
        memory.store_limit()


def test_the_default_store_bound_follows_the_free_disk(tmp_path, monkeypatch) -> None:
    """Without FASTFORWARD_COMPILED_GB: half of the free disk plus the store, never below 8 GB (a small disk
    keeps the old bound; a large one keeps several models' packages instead of rebuilding them)."""
    from fastforward.core import memory

    monkeypatch.delenv(memory.STORE_GB_ENV, raising=False)
    assert memory.store_bound(free_disk=2 * 10**9, store_bytes=10**9) == 8 * 10**9
    assert memory.store_bound(free_disk=38 * 10**9, store_bytes=14 * 10**9) == 26 * 10**9
    asked = []

    def usage(path):
        asked.append(Path(path))
        return shutil._ntuple_diskusage(100 * 10**9, 70 * 10**9, 30 * 10**9)

    monkeypatch.setattr(memory.shutil, "disk_usage", usage)
    assert memory.store_limit(tmp_path / "not" / "yet", 10**9) == 15_500_000_000  # (30 + 1) / 2 GB
    assert asked == [tmp_path]  # the nearest folder that exists
    monkeypatch.setenv(memory.STORE_GB_ENV, "3")
    assert memory.store_limit(tmp_path, 10**9) == 3 * 10**9


def _on_templates(program: torch.export.ExportedProgram, path: Path):
    """``program`` compiled into the package ``path`` with inductor's GEMM templates alone, loaded."""
    package = torch._inductor.aoti_compile_and_package(
        program,
        package_path=str(path),
        inductor_configs={
            "freezing": True,
            "max_autotune": True,
            "max_autotune_gemm_backends": "CPP",
            # as fastforward.core.aot.build sets it for a package of its own (an earlier shared-weights build
            # in this process turned it off, and the templates take frozen weights only prepacked)
            "cpp.weight_prepack": True,
        },
    )
    return torch._inductor.aoti_load_package(package)


def test_a_template_package_keeps_no_original_of_a_weight_it_laid_out(tmp_path) -> None:
    """inductor's GEMM templates lay each frozen weight out for their micro-kernels and drop the original
    only when the graph names it as the constant is named; an exported program names it by its module path,
    so without :func:`fastforward.core.aot.flatten_state_names` every int8 package held its weights twice."""
    from fastforward.core.aot import flatten_state_names
    from fastforward.models.quantize import Int8Linear

    torch.manual_seed(SEED)
    model = torch.nn.ModuleDict(
        {
            "up": torch.nn.Sequential(Int8Linear(torch.nn.Linear(64, 128, bias=False)), torch.nn.ReLU()),
            "out": Int8Linear(torch.nn.Linear(128, 32, bias=False)),
        }
    ).eval()
    model.forward = lambda x: model["out"](model["up"](x))  # an instance's own forward: nothing is patched
    x = torch.randn(4, 64, dtype=torch.bfloat16)
    program = torch.export.export(model, (x,), strict=False)
    renamed = flatten_state_names(program)
    assert renamed["up.0.qweight"] == "up_0_qweight" and renamed["out.scales"] == "out_scales"
    assert all("." not in spec.target for spec in program.graph_signature.input_specs if spec.target)
    assert torch.equal(program.module()(x), model(x))
    run = _on_templates(program, tmp_path / "m.pt2")
    assert torch.allclose(run(x).float(), model(x).float(), atol=1e-2)
    kept = run.get_constant_fqns()
    assert not {"up_0_qweight", "out_qweight"} & set(kept), kept  # laid out, so the originals are gone


class _Tied(torch.nn.Module):
    """A bias-free linear, a linear with a bias and an LM head tied to the embedding: what the transposing
    rewrite must tell apart."""

    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(16, 32, bias=False)
        self.mix = torch.nn.Linear(32, 16, bias=True)
        self.embed = torch.nn.Embedding(50, 16)
        self.head = torch.nn.Linear(16, 50, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.mix(torch.relu(self.up(x))) + self.embed(ids))


def test_transposing_rewrite_holds_only_bias_free_linear_weights_transposed() -> None:
    """Each weight only bias-free linears read is held as its transpose in the exported program, never in
    the model; a biased linear's weight (bf16 would round its sum twice) and a tied head stay as they are,
    and the program computes what the model computes."""
    from fastforward.core.aot import transpose_linear_weights

    torch.manual_seed(SEED)
    model = _Tied().eval()
    before = model.up.weight.detach().clone()
    args = (torch.arange(4), torch.randn(4, 16))
    program = torch.export.export(model, args, strict=False)
    assert transpose_linear_weights(program) == ["up.weight"]
    assert (
        program.state_dict["up.weight"].shape == (16, 32) and program.state_dict["up.weight"].is_contiguous()
    )
    assert torch.equal(program.state_dict["up.weight"], before.t())
    assert torch.equal(model.up.weight, before)  # the model keeps its own layout
    assert program.state_dict["mix.weight"].shape == (16, 32)  # [out, in] as loaded
    assert program.state_dict["head.weight"].shape == (50, 16)
    ops = [n.target for n in program.graph.nodes if n.op == "call_function"]
    assert ops.count(torch.ops.aten.linear.default) == 2 and torch.ops.aten.matmul.default in ops
    assert torch.allclose(program.module()(*args), model(*args), atol=1e-5)


@pytest.mark.skipif(
    not amx_usable(),
    reason="the bf16 GEMM templates run where AMX does (gemm_backends)",
)
def test_a_bf16_template_package_keeps_no_original_of_a_transposed_weight(tmp_path) -> None:
    """With the weights transposed, the templates lay them out and drop the originals: a bf16 package holds
    its weights once (SmolLM2-135M's 1-token package held 543 MB for 270 MB of weights before)."""
    from fastforward.core.aot import flatten_state_names, transpose_linear_weights

    torch.manual_seed(SEED)
    model = torch.nn.ModuleDict(
        {"up": torch.nn.Linear(64, 128, bias=False), "out": torch.nn.Linear(128, 32, bias=False)}
    )
    model = model.to(torch.bfloat16).eval()
    model.forward = lambda x: model["out"](torch.relu(model["up"](x)))  # an instance's own forward
    x = torch.randn(4, 64, dtype=torch.bfloat16)
    program = torch.export.export(model, (x,), strict=False)
    flatten_state_names(program)
    assert transpose_linear_weights(program) == ["up_weight", "out_weight"]
    run = _on_templates(program, tmp_path / "m.pt2")
    assert torch.allclose(run(x).float(), model(x).float(), atol=5e-2)
    kept = run.get_constant_fqns()
    assert not {"up_weight", "out_weight"} & set(kept), kept


def test_inductor_s_cache_has_a_folder_per_isa(tmp_path, monkeypatch) -> None:
    """A process under an ISA cap must not read inductor's cache entries from an uncapped one (on the AMX Xeon
    they gave tiny compiled models NaN logits): the folder is named by the ISA the process may use, under our
    root or torch's default, and a folder the user chose is kept."""
    import subprocess
    import sys

    code = (
        "import os; from fastforward.core.compiled import inductor_cache; "
        f"inductor_cache({str(tmp_path)!r}); print(os.environ['TORCHINDUCTOR_CACHE_DIR'])"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("TORCHINDUCTOR_CACHE_DIR", "ATEN_CPU_CAPABILITY")}
    env.pop("ONEDNN_MAX_CPU_ISA", None)
    capped = {**env, "ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}
    folders = [
        Path(subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True, check=True)
             .stdout.strip())
        for e in (env, capped)
    ]  # fmt: skip
    assert all(f.parent == tmp_path / "inductor" for f in folders)
    assert folders[1].name.startswith("avx2-")
    assert folders[0] != folders[1]

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "mine"))
    inductor_cache(str(tmp_path / "ours"))
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "mine")  # the user's choice stands


def test_a_server_start_loads_the_stored_packages_and_builds_none(tmp_path) -> None:
    """What a server's start-up does before moving its memory onto huge pages (``warm_stored``): it loads
    every width whose package is on disk and builds none. With only the 1-token package stored, the 1-token
    width loads and the others stay unbuilt; a model without compiled forwards is left alone."""
    from fastforward.core.engine import stored_widths, warm_stored

    first = make_tiny("llama", vocab=96, seed=SEED)
    compile_forward(first.model, capacity=256, mode=None, store=tmp_path)
    build_decoder("ar", first).generate(PROMPT, greedy_config(4))  # builds the 1-token package only
    again = make_tiny("llama", vocab=96, seed=SEED)
    runner = compile_forward(again.model, capacity=256, mode=None, store=tmp_path)
    assert stored_widths(again.model) == (1,) and not runner.startup
    warm_stored(again.model)
    assert list(runner.startup) == ["k1-s256"] and runner.startup["k1-s256"].keys() == {"loaded_s"}
    assert [p.name for p in tmp_path.glob("*/*.pt2")] == ["k1-s256.pt2"]
    eager = make_tiny("llama", vocab=96, seed=SEED)
    assert stored_widths(eager.model) == () and warm_stored(eager.model) == 0.0


def test_a_chat_loads_the_stored_packages_of_every_model_its_method_runs_before_the_first_turn(
    tmp_path, monkeypatch
) -> None:
    """``fastforward chat`` settles as a server starts: the stored packages of the target and of qsd's own
    quantized copy load (none is built) and memory then moves onto 2 MB pages; without compiled forwards it
    does neither."""
    import fastforward.cli.chat as chat_cli
    from fastforward.decoders.registry import models_run

    moved: list[int] = []
    monkeypatch.setattr(chat_cli, "huge_pages", lambda: moved.append(1) or 0)
    first = make_tiny("llama", vocab=96, seed=SEED)
    compile_forward(first.model, capacity=256, mode=None, store=tmp_path)
    for model in models_run(build_decoder("qsd", first), first):  # the target's and the copy's 1-token
        warm_buckets(model, (1,))  # packages, built and stored
    stored = sorted(p.parent.name for p in tmp_path.glob("*/k1-s256.pt2"))
    again = make_tiny("llama", vocab=96, seed=SEED)
    runner = compile_forward(again.model, capacity=256, mode=None, store=tmp_path)
    qsd = build_decoder("qsd", again)
    models = models_run(qsd, again)
    assert len(models) == 2 and models[0] is again.model  # the target, then qsd's copy, each once
    assert len(stored) == 2 and all(compiled(m) is not None and not compiled(m).startup for m in models)
    chat_cli.settle(models)
    assert moved == [1] and "k1-s256" in runner.startup
    for model in models:  # each model's stored package loaded, none built
        assert [t.keys() for t in compiled(model).startup.values()] == [{"loaded_s"}]
    eager = make_tiny("llama", vocab=96, seed=SEED)
    chat_cli.settle(models_run(build_decoder("ar", eager), eager))
    assert moved == [1]  # nothing compiled: no move


def test_a_chain_wider_than_every_compiled_width_goes_through_the_graphs_in_pieces(monkeypatch) -> None:
    """sd's gamma grows to 12; with graphs for widths 1 and 4 its 13-token verify used to run eagerly,
    whose kernels compute otherwise than the compiled AR step's (session 54: the 1.5B W8A8 pair's sd left
    its AR on 2 of 3 GSM8K prompts). Now the chain goes through the 4-token graph in pieces: each token's
    logits are its compiled 1-token step's and the eager forward never runs. (W8A8, whose graphs give a
    token the same bits at every width; float32's do that only for chains through the widths whose GEMMs
    run on inductor's templates: the next test.)"""
    from fastforward.models.quantize import quantized_copy

    model = quantized_copy(make_tiny("llama", vocab=96, seed=SEED).model, 8, activations=True)
    runner = compile_forward(model, capacity=256, mode=None, widths=(1, 4))
    chain = [40, 41, 42, 43, 44, 45, 46, 47, 48, 49]
    engine = ModelEngine(model)
    with torch.inference_mode():
        engine.start(torch.tensor([PROMPT]), capacity=len(PROMPT) + 16)
        steps = []
        for t in chain:
            steps.append(engine.forward([Block.chain([t])]).logits[0][-1].clone())
            engine.keep([[0]])
        engine.truncate(0, len(PROMPT))
        monkeypatch.setattr(runner, "eager", lambda *a, **k: pytest.fail("ran eagerly"))
        wide = engine.forward([Block.chain(chain)])
        assert wide.sizes == [len(chain)] and engine.lengths == [len(PROMPT)]
        torch.testing.assert_close(wide.logits[0], torch.stack(steps), rtol=0, atol=0)
        engine.keep([list(range(len(chain)))])
        assert engine.lengths == [len(PROMPT) + len(chain)]
        nxt = engine.forward([Block.chain([50])]).logits[0][-1]
    engine.close()
    assert engine.ran == "compiled" and runner.used == {1, 4}
    assert torch.isfinite(nxt).all()


@pytest.mark.skipif(
    torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"), reason="templates need AVX2"
)
@pytest.mark.parametrize("wide", [4, 16])
def test_float32_chains_and_trees_through_the_gemm_templates_keep_each_token_s_1_token_bits(
    tmp_path, wide
) -> None:
    """float32 packages up to fp32_template_width() tokens run every GEMM on inductor's templates
    (:func:`gemm_backends`), which add a row's products in the same order however many rows share them: a
    4-token chain gives each token its 1-token step's logits bit for bit, and so does a tree to a node whose
    hidden sibling sits among its ancestors' slots, since the softmax's denominator is a GEMM too
    (:func:`grouped_attention`). So no near-tie can flip between a method's verify forward and AR there.
    Measured on SmolLM2-135M on an Ice Lake Xeon (session 57): chains bit for bit at widths 2, 4 and 8; the
    16- and 32-token packages (oneDNN with AVX-512) differ by up to 6e-5; a tree node differed by 3e-5
    while the denominator was a vectorized sum. Through the g++ front the 16-token package (the 4-token
    chain padded to 16) runs the templates too, and keeps the bits."""
    from fastforward.core.compiled import fp32_template_width
    from tests.conftest import assert_wider_forwards_keep_step_bits

    if wide > fp32_template_width() and torch.backends.cpu.get_cpu_capability() != "AVX2":
        pytest.skip("without the g++ front, oneDNN runs float32 packages wider than 8 tokens here")
    fast = make_tiny("llama", vocab=96, seed=SEED)
    runner = compile_forward(fast.model, capacity=256, store=tmp_path, widths=(1, wide))
    runner.shared_weights = False  # a tiny model's weights would be shared, whose GEMMs are ATen's
    assert runner.gemm_for(1) == runner.gemm_for(wide) == "CPP"
    assert_wider_forwards_keep_step_bits(fast.model, PROMPT)
    assert runner.used == {1, wide}


def test_chain_pieces_pad_the_rest_only_where_the_cache_has_room() -> None:
    """Widest pieces first, the rest padded up to its bucket; near the end of the cache the rest is cut into
    pieces that fill a width exactly (padding would write past the last slot); None when nothing fits."""
    assert chain_pieces(10, (1, 4), room=64) == [(4, 4), (4, 4), (2, 4)]
    assert chain_pieces(10, (1, 4), room=10) == [(4, 4), (4, 4), (1, 1), (1, 1)]
    assert chain_pieces(13, (1, 4, 8), room=13) == [(8, 8), (4, 4), (1, 1)]
    assert chain_pieces(13, (1, 4, 8), room=16) == [(8, 8), (5, 8)]
    assert chain_pieces(2, (1, 4), room=2) == [(1, 1), (1, 1)]  # narrower than a width, but not padded
    assert chain_pieces(6, (4,), room=6) is None  # the last 2 fill no width
    assert chain_pieces(9, (1, 4), room=8) is None


def test_a_wide_chain_at_the_end_of_the_fixed_cache_fills_its_last_slots_exactly(monkeypatch) -> None:
    """A 10-token chain whose last slot is the fixed cache's last: pieces of 4, 4 and a padded 4 would write
    past it, so the rest goes through the 1-token graph (this used to recurse without end), and every
    token's logits are still its 1-token step's."""
    from fastforward.models.quantize import quantized_copy

    model = quantized_copy(make_tiny("llama", vocab=96, seed=SEED).model, 8, activations=True)
    runner = compile_forward(model, capacity=256, mode=None, widths=(1, 4))
    engine = ModelEngine(model)
    prompt = [(7 * i + 3) % 96 for i in range(224)]
    chain = [40, 41, 42, 43, 44, 45, 46, 47, 48, 49]
    with torch.inference_mode():
        engine.start(torch.tensor([prompt]), capacity=len(prompt))
        capacity = engine.cache.capacity
        for t in range(capacity - len(chain) - len(prompt)):  # fill up to 10 slots before the end
            engine.forward([Block.chain([t % 96])])
            engine.keep([[0]])
        start = engine.lengths[0]
        assert start + len(chain) == capacity
        steps = []
        for t in chain:
            steps.append(engine.forward([Block.chain([t])]).logits[0][-1].clone())
            engine.keep([[0]])
        engine.truncate(0, start)
        monkeypatch.setattr(runner, "eager", lambda *a, **k: pytest.fail("ran eagerly"))
        wide = engine.forward([Block.chain(chain)])
        torch.testing.assert_close(wide.logits[0], torch.stack(steps), rtol=0, atol=0)
        assert engine.lengths == [start] and wide.fed == 4 + 4 + 1 + 1
        # a 2-token chain in the last 2 slots: narrower than the 4-token graph, which would pad past the end
        engine.keep([list(range(len(chain)))])
        engine.truncate(0, capacity - 2)
        last = engine.forward([Block.chain(chain[-2:])])
        torch.testing.assert_close(last.logits[0], torch.stack(steps[-2:]), rtol=0, atol=0)
        assert last.fed == 2
    engine.close()
    assert engine.ran == "compiled"

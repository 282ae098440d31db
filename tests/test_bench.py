"""The bench JSON contract that later issues and checks read."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fastforward.bench.runner import run_bench
from fastforward.chimera.train import new_draft
from fastforward.core.decoder import GenerationConfig
from fastforward.data import load_dataset
from fastforward.decoders.chimera import ChimeraDecoder, ChimeraOptions
from fastforward.decoders.registry import (
    build_decoder,
    build_decoders,
    options_for,
    parse_options,
    resolve_methods,
)
from fastforward.errors import FastForwardError

from .conftest import make_tiny


def test_run_bench_contract_on_real_model(smollm2):
    samples = load_dataset("mtbench", 1)  # two turns -> two generations per method
    decoders = {m: build_decoder(m, smollm2) for m in ("ar", "hf_generate", "jacobi")}
    cfg = GenerationConfig(max_new_tokens=8, eos_token_ids=smollm2.eos_token_ids)
    out = run_bench(smollm2, decoders, samples, cfg, "mtbench", warmup=1)
    assert {"model", "dtype", "dataset", "hardware", "methods"} <= out.keys()
    # provenance: the ISA, versions, revision and date of every result
    assert out["isa"] and out["versions"]["torch"] and out["date"].endswith("Z") and "revision" in out
    # what ran: AR steps vs parallel ones, per method (jacobi's gate may take either; AR is all AR steps)
    ar, jac = out["methods"]["ar"], out["methods"]["jacobi"]
    assert ar["ar_step_share"] == 1.0 and ar["parallel_steps"] == 0 and ar["width_hist"][1] == ar["ar_steps"]
    assert jac["ar_steps"] + jac["parallel_steps"] == jac["target_forwards"] - jac["samples"]
    assert jac["ar_step_share"] == jac["ar_steps"] / (jac["ar_steps"] + jac["parallel_steps"])
    for name in ("ar", "hf_generate"):
        m = out["methods"][name]
        assert {
            "tokens_per_s",
            "speedup_vs_ar",
            "mean_accepted_tokens",
            "identical_to_ar",
            "samples",
        } <= m.keys()
        assert m["samples"] == 2 and m["tokens_per_s"] > 0
    assert out["methods"]["ar"]["speedup_vs_ar"] == 1.0
    assert out["methods"]["ar"]["mean_accepted_tokens"] == 1.0
    assert out["methods"]["hf_generate"]["identical_to_ar"] == 1.0
    assert out["ar_vs_hf_generate"] > 0
    assert [s["dataset"] for s in out["methods"]["ar"]["per_sample"]] == ["mtbench", "mtbench"]
    json.dumps(out)  # serialisable


def test_cli_bench_writes_json_and_table(tmp_path):
    out = tmp_path / "r.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "fastforward.cli",
            "bench",
            "--dataset",
            "gsm8k",
            "--limit",
            "1",
            "--max-new-tokens",
            "6",
            "--methods",
            "ar,hf_generate,sd",
            "--draft",
            "smollm2-135m",
            "--noise-floor",
            "--warmup",
            "0",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    assert data["dataset"] == "gsm8k" and data["methods"]["ar"]["samples"] == 1
    assert "| ar |" in out.with_suffix(".md").read_text()
    assert data["methods"]["ar:twin"]["samples"] == 1 and data["noise_floor"]["row"] == "ar:twin"
    assert "Noise floor: ar:twin" in out.with_suffix(".md").read_text()


def test_method_resolution_and_all_asks_each_decoder():
    tiny, draft = make_tiny(), make_tiny(seed=1)
    assert resolve_methods("ar,hf_generate") == ["ar", "hf_generate"]
    alone = build_decoders("all", tiny, None, {})
    assert {"ar", "hf_generate", "jacobi", "lookahead", "pld", "layerskip"} <= set(alone)
    assert not {"sd", "hf_assisted", "chimera"} & set(alone)  # no draft, no heads: skipped, not an error
    paired = build_decoders("all", tiny, draft, {})
    assert {"sd", "hf_assisted"} <= set(paired)
    assert not {"consultant", "typical", "sd-sample"} & set(paired)  # lossy / sampling-only: opt-in
    assert all(d.lossless and d.in_all for d in paired.values())
    assert paired["sd"].needs_draft and not paired["pld"].needs_draft
    with pytest.raises(FastForwardError, match="needs a draft model"):
        build_decoders("ar,sd", tiny, None, {})  # named explicitly: the one-line error
    assert parse_options(["block_size=16", "eps=2.5", "init=random", "adaptive=true"]) == {
        "block_size": 16,
        "eps": 2.5,
        "init": "random",
        "adaptive": True,
    }


def test_tagged_methods_get_their_own_scoped_options():
    labels = resolve_methods("ar,jacobi,jacobi:b16,pld")
    assert labels == ["ar", "jacobi", "jacobi:b16", "pld"]
    opts = parse_options(["init=repeat", "gamma=3", "jacobi:b16.block_size=16"])
    # unscoped options go to the methods that have them; scoped ones to their label only
    assert options_for("jacobi", opts, labels) == {"init": "repeat"}
    assert options_for("jacobi:b16", opts, labels) == {"init": "repeat", "block_size": 16}
    assert options_for("pld", opts, labels) == {"gamma": 3}
    assert options_for("ar", opts, labels) == {}
    with pytest.raises(FastForwardError, match="no method in --methods"):
        options_for("jacobi", parse_options(["max_iters=8"]), labels)
    with pytest.raises(FastForwardError, match="not in --methods"):
        options_for("jacobi", parse_options(["jacobi:typo.block_size=4"]), labels)
    with pytest.raises(FastForwardError, match="unknown option 'blocksize'"):
        build_decoders("ar,jacobi", make_tiny(), None, parse_options(["jacobi.blocksize=4"]))
    with pytest.raises(FastForwardError, match="twice"):
        resolve_methods("ar,jacobi,jacobi")
    with pytest.raises(FastForwardError, match="unknown method"):
        resolve_methods("nosuch:tag")


def test_bench_reports_what_the_decoder_says_chimera_typical_is_lossy(smollm2):
    """lossless comes from the configured decoder, not the method name: chimera accept=typical is lossy."""
    decoders = {
        "ar": build_decoder("ar", smollm2),
        "chimera": ChimeraDecoder(smollm2.model, new_draft(smollm2.model), ChimeraOptions()),
        "chimera:typ": ChimeraDecoder(
            smollm2.model, new_draft(smollm2.model), ChimeraOptions(accept="typical")
        ),
    }
    cfg = GenerationConfig(max_new_tokens=4, eos_token_ids=smollm2.eos_token_ids)
    out = run_bench(smollm2, decoders, load_dataset("gsm8k", 1), cfg, "gsm8k", warmup=0)
    assert out["methods"]["chimera"]["lossless"] is True
    assert out["methods"]["chimera:typ"]["lossless"] is False
    assert out["methods"]["ar"]["lossless"] is True


def test_a_tagged_label_builds_its_base_method(smollm2):
    dec = build_decoder("pld:short", smollm2, None, {"gamma": 2})
    assert dec.name == "pld"  # the method's own logic (drafter choice) keys on the base name


def test_a_compiled_bench_warms_the_graphs_its_methods_use(monkeypatch):
    """Before timing: the 1-token bucket for AR-like methods only, every bucket for a parallel method, and
    the hidden-state graphs too when a method's verify forwards return hidden states (Chimera), so no timed
    request compiles or loads a graph."""
    from fastforward.bench import runner
    from fastforward.core.compiled import BUCKETS

    calls = []
    monkeypatch.setattr(
        runner,
        "warm_buckets",
        lambda model, widths, hidden=False, sizes=(): (
            calls.append((tuple(widths), hidden, tuple(sizes))) or 0.0
        ),
    )

    class Reads:
        hidden_states = True

    class Hidden:
        def proposer(self, solo):
            return Reads()

    class Peer:  # a peer's generate(): no proposer
        def proposer(self, solo):
            raise FastForwardError("no batched path")

    target = make_tiny()
    runner.warm_graphs(target, {"ar": object(), "hf_generate": Peer()}, (512,))
    assert calls == [((1,), False, (512,))]
    calls.clear()
    runner.warm_graphs(target, {"ar": object(), "pld": Peer()}, (512,))
    assert calls == [(BUCKETS, False, (512,))]
    calls.clear()
    runner.warm_graphs(target, {"ar": object(), "chimera": Hidden()}, (512, 1024))
    assert calls == [(BUCKETS, False, (512, 1024)), (BUCKETS, True, (512, 1024))]


def test_which_decoders_read_hidden_states():
    """Chimera's verify forwards return hidden states; AR's, pld's and a peer's generate() do not."""
    from fastforward.bench.runner import reads_hidden_states

    tiny = make_tiny()
    chimera = ChimeraDecoder(tiny.model, new_draft(tiny.model), ChimeraOptions(tree="chain"))
    assert reads_hidden_states(chimera)
    assert not reads_hidden_states(build_decoder("ar", tiny)) and not reads_hidden_states(
        build_decoder("pld", tiny)
    )
    assert not reads_hidden_states(build_decoder("hf_generate", tiny))


class _Tok:
    """The tiny model has no tokenizer: every prompt is the same few ids."""

    chat_template = None

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": [5, 17, 33, 2]}

    def decode(self, ids, skip_special_tokens=True):
        return " ".join(map(str, ids))


def _tiny_with_tokenizer():
    """The tiny random model with :class:`_Tok`, so run_bench can render and decode its prompts."""
    from dataclasses import replace

    return replace(make_tiny(), tokenizer=_Tok())


def test_timed_generations_run_with_the_heap_frozen_and_the_warm_up_without():
    """A full collection over a loaded model's objects stalls ~200 ms: the bench freezes the heap after the
    warm-up (memory.freeze_heap) so none lands on one method's timed generation, and thaws it after."""
    import gc

    from fastforward.data import Sample

    target = _tiny_with_tokenizer()
    ar = build_decoder("ar", target)
    seen = []

    class Recording:
        lossless = True

        def generate(self, ids, config):
            seen.append(gc.get_freeze_count())
            return ar.generate(ids, config)

        def reopen_estimates(self):
            pass

    assert gc.get_freeze_count() == 0
    samples = [Sample(id=f"s{i}", dataset="t", turns=("count to ten",)) for i in range(2)]
    out = run_bench(target, {"ar": Recording()}, samples, GenerationConfig(max_new_tokens=4), "t", warmup=1)
    assert isinstance(out["huge_page_bytes"], int)  # what the timed run's pages were, said in the result
    assert seen[0] == 0 and all(n > 0 for n in seen[1:]) and len(seen) == 3
    assert gc.get_freeze_count() == 0


def test_a_row_run_in_another_process_is_always_followed_by_an_untimed_ar_rewarm():
    """After a reference row that decodes in its own process (llama.cpp), AR generates a few untimed tokens
    in this one before the next method is timed, the next turn's first one included; the timed AR and every
    total are unchanged by it."""
    from fastforward.bench.runner import REWARM_TOKENS
    from fastforward.data import Sample

    target = _tiny_with_tokenizer()
    ar = build_decoder("ar", target)
    calls: list[tuple[str, int]] = []

    class Recording:
        lossless = True

        def __init__(self, name: str, separate: bool) -> None:
            self.name, self.separate_process = name, separate

        def generate(self, ids, config):
            calls.append((self.name, config.max_new_tokens))
            return ar.generate(ids, config)

        def reopen_estimates(self):
            pass

    decoders = {"ar": Recording("ar", False), "ref": Recording("ref", True)}
    samples = [Sample(id=f"s{i}", dataset="t", turns=("count to ten",)) for i in range(6)]
    out = run_bench(target, decoders, samples, GenerationConfig(max_new_tokens=20), "t", warmup=0)
    assert out["methods"]["ar"]["samples"] == out["methods"]["ref"]["samples"] == 6
    timed = [name for name, n in calls if n == 20]
    turns = [timed[i : i + 2] for i in range(0, len(timed), 2)]
    assert len(turns) == 6 and all(sorted(t) == ["ar", "ref"] for t in turns)
    rewarms = [i for i, c in enumerate(calls) if c == ("ar", REWARM_TOKENS)]
    # one rewarm right after every reference row; where that row ran first, right before the turn's timed AR
    assert 0 < sum(t[0] == "ref" for t in turns) < 6  # both positions occur in these turns
    assert len(rewarms) == 6 and all(calls[i - 1][0] == "ref" for i in rewarms)
    assert all(i + 1 == len(calls) or calls[i + 1][1] == 20 for i in rewarms)  # then a timed generation
    assert any(calls[i + 1] == ("ar", 20) for i in rewarms if i + 1 < len(calls))


def test_each_method_but_ar_gets_a_speedup_interval_over_the_turns_and_the_table_shows_it():

    from fastforward.bench.report import markdown_table
    from fastforward.data import Sample

    target = _tiny_with_tokenizer()
    decoders = {"ar": build_decoder("ar", target), "pld": build_decoder("pld", target)}
    samples = [Sample(id=f"s{i}", dataset="t", turns=("count to ten",)) for i in range(3)]
    out = run_bench(target, decoders, samples, GenerationConfig(max_new_tokens=6), "t", warmup=0)
    assert out["methods"]["ar"]["speedup_interval_90"] is None
    lo, hi = out["methods"]["pld"]["speedup_interval_90"]
    assert 0 < lo <= hi
    assert f"({lo:.2f}-{hi:.2f})" in markdown_table({**out, "hardware": "test"})
    assert "noise_floor" not in out  # no second AR row, no floor


def test_a_bench_with_a_second_ar_row_records_its_noise_floor():
    from fastforward.data import Sample

    target = _tiny_with_tokenizer()
    decoders = {n: build_decoder(n, target) for n in ("ar", "ar:twin", "pld")}
    samples = [Sample(id=f"s{i}", dataset="t", turns=("count to ten",)) for i in range(3)]
    out = run_bench(target, decoders, samples, GenerationConfig(max_new_tokens=6), "t", warmup=0)
    floor, twin = out["noise_floor"], out["methods"]["ar:twin"]
    assert floor["row"] == "ar:twin" and floor["speedup"] == twin["speedup_vs_ar"]
    lo, hi = floor["band"]
    assert lo <= min(twin["speedup_vs_ar"], *twin["speedup_interval_90"]) and hi >= twin["speedup_vs_ar"]
    assert abs((1 - lo) - (hi - 1)) < 1e-9  # symmetric about 1.00x
    pld = out["methods"]["pld"]["speedup_vs_ar"]
    assert floor["within"] == (["pld"] if lo <= pld <= hi else [])


def test_a_frozen_heap_stays_frozen_inside_another_and_thaws_with_the_outer():
    import gc

    from fastforward.core.memory import frozen_heap

    alive = [object()]
    with frozen_heap():
        n = gc.get_freeze_count()
        assert n > 0 and not any(o is alive for o in gc.get_objects())
        with frozen_heap():
            pass
        assert gc.get_freeze_count() >= n
    assert gc.get_freeze_count() == 0 and any(o is alive for o in gc.get_objects())


MAPS = """\
7f0000000000-7f0000600000 rw-p 00000000 00:00 0
7f0000600000-7f0000a00000 r--p 00000000 fd:01 1234                       /usr/lib/libfoo.so
7f0000a00000-7f0000c00000 rw-s 00000000 00:01 99                         /dev/zero (deleted)
7f0001000000-7f0001100000 rw-p 00000000 00:00 0
7f0002000000-7f0002400000 r--p 00000000 00:00 0
7f0003000123-7f0003600000 rw-p 00000000 00:00 0
55d000000000-55d000800000 rw-p 00000000 00:00 0                          [heap]
7ffc00000000-7ffc00800000 rw-p 00000000 00:00 0                          [stack]
7f0004000000-7f0004800000 rw-p 00000000 fd:01 77                         /tmp/weights.bin
"""


def test_anonymous_spans_are_the_private_writable_unnamed_mappings_cut_to_whole_huge_pages():
    from fastforward.core.memory import HUGE_PAGE, anonymous_spans

    spans = anonymous_spans(MAPS)
    assert spans == [
        (0x7F0000000000, 0x7F0000600000),  # 6 MB, aligned already
        (0x7F0003200000, 0x7F0003600000),  # its start rounded up to the next 2 MB
        (0x55D000000000, 0x55D000800000),  # the heap
    ]  # not: a library, shared memory, a 1 MB mapping, a read-only one, the stack, a mapped file
    assert all(s % HUGE_PAGE == 0 and e % HUGE_PAGE == 0 for s, e in spans)
    assert anonymous_spans(MAPS, least=4 * HUGE_PAGE) == [(0x55D000000000, 0x55D000800000)]


def test_thp_mode_reads_the_bracketed_word(tmp_path):
    from fastforward.core.memory import thp_mode

    (tmp_path / "enabled").write_text("always [madvise] never\n")
    assert thp_mode(tmp_path / "enabled") == "madvise"
    assert thp_mode(tmp_path / "missing") is None


def test_anon_huge_bytes_reads_the_rollup(tmp_path):
    from fastforward.core.memory import anon_huge_bytes

    (tmp_path / "rollup").write_text("Rss:  1344100 kB\nAnonymous:  917672 kB\nAnonHugePages:  903168 kB\n")
    assert anon_huge_bytes(tmp_path / "rollup") == 903168 * 1024
    assert anon_huge_bytes(tmp_path / "missing") == 0


def test_huge_pages_off_by_environment_never_advises(monkeypatch):
    from fastforward.core import memory

    def refuse():
        raise AssertionError("madvise looked up although FASTFORWARD_HUGE_PAGES=0")

    monkeypatch.setenv(memory.HUGE_PAGES_ENV, "0")
    monkeypatch.setattr(memory, "thp_mode", lambda: "always")
    monkeypatch.setattr(memory, "_madvise", refuse)
    monkeypatch.setattr(memory, "anon_huge_bytes", lambda: 123 << 21)
    assert memory.huge_pages() == 123 << 21  # what the kernel gave by itself is still said


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs Linux /proc")
def test_huge_pages_advises_and_collapses_a_tensor_and_keeps_its_contents(monkeypatch):
    """A large tensor lives in one of the spans huge_pages advises; its memory is advised and collapsed in
    pieces, and every value stays as it was."""
    from fastforward.core import memory

    real = memory._madvise()
    if real is None:
        pytest.skip("no libc madvise")
    calls: list[tuple[int, int, int]] = []

    def recording(addr, length, advice):
        calls.append((addr, length, advice))
        return real(addr, length, advice)

    monkeypatch.setattr(memory, "_madvise", lambda: recording)
    monkeypatch.setattr(memory, "thp_mode", lambda: "madvise")
    monkeypatch.delenv(memory.HUGE_PAGES_ENV, raising=False)
    t = torch.arange(16 << 20, dtype=torch.float32)  # 64 MB
    expect = t.clone()
    start, end = t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()
    mid = (start + end) // 2 // memory.HUGE_PAGE * memory.HUGE_PAGE  # a huge page inside the tensor
    assert memory.huge_pages() >= 0
    covered = {a for a, n, advice in calls if a <= mid and mid + memory.HUGE_PAGE <= a + n}
    advised = {adv for a, n, adv in calls if a <= mid and mid + memory.HUGE_PAGE <= a + n}
    assert covered and advised == {memory.MADV_HUGEPAGE, memory.MADV_COLLAPSE}
    assert all(n <= memory.COLLAPSE_PIECE for _, n, adv in calls if adv == memory.MADV_COLLAPSE)
    assert torch.equal(t, expect)


def test_turn_order_is_a_fixed_permutation_that_changes_every_methods_neighbours():
    from fastforward.bench.runner import turn_order

    names = ["ar", "jacobi", "lookahead", "suffix", "pld", "qsd", "llamacpp"]
    orders = [turn_order(names, k) for k in range(16)]
    assert all(sorted(o) == sorted(names) for o in orders)
    assert orders == [turn_order(names, k) for k in range(16)]  # the same in every call
    assert turn_order(["a", "b", "c", "d", "e"], 0) == ["d", "b", "a", "c", "e"]  # and every process
    before_ar = {o[o.index("ar") - 1] for o in orders if o[0] != "ar"}
    assert len(before_ar) > 2  # a rotation gave AR one predecessor, always llama.cpp
    assert len({o.index("ar") for o in orders}) > 3

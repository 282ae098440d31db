"""What makes the CLI trustworthy beyond one-line errors (issue 16): benchmarks that survive an interruption and
resume to the same result, methods and defaults a user can discover, the dtype chooser on recorded CPUs, the
busy-machine guard, a cache that is reported corrupt rather than ready, and tables that explain bf16."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fastforward.bench.report import markdown_table
from fastforward.bench.runner import run_bench
from fastforward.bench.samplelog import SampleLog, atomic_write_text, log_path
from fastforward.core.decoder import GenerationConfig
from fastforward.data import load_dataset
from fastforward.decoders.registry import METHODS, build_decoder, build_decoders, method_options
from fastforward.errors import FastForwardError
from fastforward.hardware import BusyState, choose_dtype, choose_threads

from .conftest import make_tiny


# /proc/cpuinfo flags of two CPUs this project runs on: an AVX2-only AMD EPYC (this CI machine) and an
# AVX-512 EPYC with bf16 (where docs/results.md was measured)
def _flags(line: str) -> set[str]:
    return set(line.split())


AVX2_FLAGS = _flags(
    "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ht syscall "
    "nx mmxext fxsr_opt pdpe1gb rdtscp lm constant_tsc rep_good nopl xtopology nonstop_tsc cpuid extd_apicid "
    "pni pclmulqdq ssse3 fma cx16 pcid sse4_1 sse4_2 x2apic movbe popcnt aes xsave avx f16c rdrand hypervisor "
    "lahf_lm abm sse4a misalignsse 3dnowprefetch topoext bmi1 avx2 smep bmi2 erms invpcid rdseed adx smap "
    "clflushopt clwb sha_ni xsaveopt xsavec xgetbv1 xsaves vaes vpclmulqdq rdpid fsrm"
)
AVX512_BF16_FLAGS = AVX2_FLAGS | _flags(
    "avx512f avx512dq avx512ifma avx512cd avx512bw avx512vl avx512_bf16 avx512vbmi avx512_vbmi2 gfni "
    "avx512_vnni avx512_bitalg avx512_vpopcntdq"
)
SPR_AMX_FLAGS = AVX512_BF16_FLAGS | {"amx_bf16", "amx_tile", "amx_int8"}


def _cli(*args: str, cwd: Path | None = None, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "fastforward", *args], capture_output=True, text=True, cwd=cwd, **kw
    )


# --------------------------------------------------------------------------- resume


def _comparable(result: dict) -> dict:
    """A bench result without what differs between two runs of the same tokens (timings)."""
    out = {}
    for name, m in result["methods"].items():
        out[name] = {
            "samples": [{k: v for k, v in s.items() if k != "wall_time_s"} for s in m["per_sample"]],
            "new_tokens": m["new_tokens"],
            "target_forwards": m["target_forwards"],
            "identical_to_ar": m["identical_to_ar"],
            "mean_accepted_tokens": m["mean_accepted_tokens"],
        }
    return out


def test_an_interrupted_bench_resumes_to_the_uninterrupted_result(smollm2, tmp_path: Path) -> None:
    """Stop after 3 of 4 turns (a Ctrl-C inside the run), resume from the sample log: the resumed run
    generates only the missing turn, and its result equals an uninterrupted run's, with no duplicates."""
    samples = load_dataset("mtbench", 2)  # two turns each: turn 2 is built on AR's turn-1 answer
    decoders = {m: build_decoder(m, smollm2) for m in ("ar", "pld")}
    config = GenerationConfig(max_new_tokens=5, eos_token_ids=smollm2.eos_token_ids)
    full = run_bench(smollm2, decoders, samples, config, "mtbench", warmup=0)

    path = tmp_path / "r.samples.jsonl"
    first = SampleLog.open(path, {"run": 1}, resume=False)

    def interrupt_after_three(record: dict) -> None:
        first.append(record)
        if len(first.done) == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_bench(smollm2, decoders, samples, config, "mtbench", warmup=0, on_turn=interrupt_after_three)
    first.close()

    with pytest.raises(FastForwardError, match="add --resume"):
        SampleLog.open(path, {"run": 1}, resume=False)  # never silently overwritten
    with pytest.raises(FastForwardError, match="--run differs"):
        SampleLog.open(path, {"run": 2}, resume=True)
    second = SampleLog.open(path, {"run": 1}, resume=True)
    assert len(second.done) == 3
    generated: list[dict] = []

    def keep(record: dict) -> None:
        generated.append(record)
        second.append(record)

    resumed = run_bench(
        smollm2, decoders, samples, config, "mtbench", warmup=0, saved=second.done, on_turn=keep
    )
    second.close()
    assert [(r["index"], r["turn"]) for r in generated] == [(1, 1)]  # built on the saved turn-1 answer
    assert _comparable(resumed) == _comparable(full)
    keys = [(s["id"], s["turn"]) for s in resumed["methods"]["ar"]["per_sample"]]
    assert len(keys) == len(set(keys)) == 4


def test_a_torn_last_line_is_dropped_on_resume(tmp_path: Path) -> None:
    path = tmp_path / "r.samples.jsonl"
    log = SampleLog.open(path, {"a": 1}, resume=False)
    log.append({"index": 0, "turn": 0, "methods": {}})
    log.close()
    with path.open("a") as f:
        f.write('{"index": 0, "turn": 1, "meth')  # the turn in flight when the power went
    again = SampleLog.open(path, {"a": 1}, resume=True)
    assert list(again.done) == [(0, 0)]
    again.append({"index": 0, "turn": 1, "methods": {}})
    again.close()
    assert [json.loads(line) for line in path.read_text().splitlines()][-1]["turn"] == 1


def test_the_stop_message_counts_the_turns_in_the_file_not_in_memory(tmp_path: Path) -> None:
    """Ctrl-C between a turn's fsync and its entry in ``done`` (the race that once hid the --resume hint in
    the CLI test below): the file holds the turn, so the count a resume will find comes from the file."""
    path = tmp_path / "r.samples.jsonl"
    log = SampleLog.open(path, {"a": 1}, resume=False)
    log.append({"index": 0, "turn": 0, "methods": {}})
    del log.done[(0, 0)]  # as if the interrupt landed before the dict was updated
    assert log.saved_turns() == 1
    log.close(remove=True)
    assert log.saved_turns() == 0  # no file: nothing saved


def test_atomic_write_replaces_whole_files_and_leaves_no_temporaries(tmp_path: Path) -> None:
    target = tmp_path / "r.json"
    atomic_write_text(target, "old")
    atomic_write_text(target, "new")
    assert target.read_text() == "new" and [p.name for p in tmp_path.iterdir()] == ["r.json"]
    assert log_path(target) == tmp_path / "r.samples.jsonl"


def test_cli_bench_interrupted_by_ctrl_c_then_resumed(tmp_path: Path) -> None:
    """The real CLI: SIGINT (Ctrl-C) after the first finished turn keeps it; --resume finishes the run with
    every turn exactly once, writes JSON and table, and removes the log."""
    # 6 questions x 2 turns x 2 methods = 24 turns: enough that a loaded machine cannot finish them all
    # between the first saved turn and the signal (with 12 turns it once did)
    argv = ["bench", "--dataset", "mtbench", "--limit", "6", "--max-new-tokens", "8", "--methods", "ar,pld",
            "--dtype", "float32", "--warmup", "0", "--out", "r.json"]  # fmt: skip
    log = tmp_path / "r.samples.jsonl"
    # the child gets Ctrl-C's default disposition, as from a terminal: an ignored SIGINT in the test process
    # (inherited across exec, so Python would install no KeyboardInterrupt handler) must not hide the check
    parent_sigint = signal.getsignal(signal.SIGINT)
    proc = subprocess.Popen(
        [sys.executable, "-m", "fastforward", *argv], cwd=tmp_path, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    deadline = time.monotonic() + 600
    sent = False
    while time.monotonic() < deadline and proc.poll() is None:
        if log.exists() and len(log.read_text().splitlines()) >= 2:  # header + one finished turn
            proc.send_signal(signal.SIGINT)  # our own child: the only process this test signals
            sent = True
            break
        time.sleep(0.05)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 130, (
        f"{err}\n(SIGINT sent: {sent}; the test process's SIGINT handler: {parent_sigint})"
    )
    assert "--resume" in err and "Traceback" not in err
    assert not (tmp_path / "r.json").exists()
    saved = len(log.read_text().splitlines()) - 1
    assert 1 <= saved < 24

    done = _cli(*argv, "--resume", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"resuming: {saved} turns done" in done.stderr
    result = json.loads((tmp_path / "r.json").read_text())
    for m in result["methods"].values():
        keys = [(s["id"], s["turn"]) for s in m["per_sample"]]
        assert len(keys) == len(set(keys)) == 12
    assert (tmp_path / "r.md").read_text().startswith("**smollm2-135m**")
    assert not log.exists()


def test_out_md_writes_the_json_beside_it(tmp_path: Path) -> None:
    from fastforward.cli.bench import out_paths

    assert out_paths(str(tmp_path / "x.md")) == (tmp_path / "x.json", tmp_path / "x.md")
    assert out_paths(str(tmp_path / "x.json")) == (tmp_path / "x.json", tmp_path / "x.md")


# --------------------------------------------------------------------------- discoverability


def test_methods_lists_every_method_with_lossless_needs_and_options() -> None:
    proc = _cli("methods")
    assert proc.returncode == 0, proc.stderr
    for name, spec in METHODS.items():
        assert f"{name}: {spec.summary}" in proc.stdout
    assert "lossless: no (lossy); needs: a draft model" in proc.stdout  # typical / consultant
    assert "--opt block_size" in proc.stdout and "[default: 16]" in proc.stdout
    one = json.loads(_cli("methods", "consultant", "--json").stdout)
    eps = next(o for o in one[0]["options"] if o["name"] == "eps")
    assert eps["default"] == "2.0" and "EMA" in eps["help"]


def test_every_option_of_every_method_has_help_and_no_method_gets_another_ones_options() -> None:
    for name in METHODS:
        for doc in method_options(name):
            assert doc.help, f"{name}.{doc.name} has no help text"
    assert {d.name for d in method_options("pld")} >= {"gamma", "ngram_max"}
    assert "bits" not in {d.name for d in method_options("pld")}
    assert "prompt_lookup" not in {d.name for d in method_options("hf_generate")}


def test_the_static_facts_match_what_the_decoders_say() -> None:
    """MethodSpec (used before a model loads) agrees with the built decoders (used to report a run)."""
    tiny, draft = make_tiny(), make_tiny(seed=1)
    for name, spec in METHODS.items():
        if name in ("chimera", "sd-cross", "auto"):
            continue  # trained heads / a second tokenizer / timing on text prompts: covered by their own tests
        dec = build_decoder(name, tiny, draft if spec.needs_draft else None)
        assert dec.needs_draft == spec.needs_draft, name
        assert dec.lossless == spec.lossless.startswith(("yes", "reference")), name
        assert (dec.in_all and dec.lossless) == spec.in_all, name
    assert set(build_decoders("all", tiny, draft, {})) == {n for n, s in METHODS.items() if s.in_all}


def _all_actions():
    import argparse

    from fastforward.cli import build_parser

    def walk(parser, path):
        for a in parser._actions:
            if isinstance(a, argparse._SubParsersAction):
                for name, sub in a.choices.items():
                    yield from walk(sub, [*path, name])
            elif not isinstance(a, (argparse._HelpAction, argparse._VersionAction)):
                yield path, a

    yield from walk(build_parser(), [])


def test_every_option_has_help_text() -> None:
    # serve and chat belong to the server work (issue 15) and are checked there
    missing = [
        f"{' '.join(p)} {a.dest}" for p, a in _all_actions() if not a.help and p[0] not in ("serve", "chat")
    ]
    assert not missing


def test_help_shows_defaults_and_version_is_printed() -> None:
    proc = _cli("bench", "--help")
    assert proc.returncode == 0
    text = " ".join(proc.stdout.split())
    assert "(default: mtbench)" in text and "(default: auto)" in text and "(default: 10)" in text
    version = _cli("--version")
    assert version.returncode == 0 and version.stdout.startswith("fastforward 0.")


def test_dtype_names_match_the_loader() -> None:
    from fastforward.cli.validate import DTYPE_NAMES
    from fastforward.models.loading import DTYPES

    assert tuple(DTYPES) == DTYPE_NAMES


# --------------------------------------------------------------------------- machine


@pytest.mark.parametrize(
    ("device", "flags", "capability", "cuda_bf16", "dtype"),
    [
        ("cpu", AVX2_FLAGS, "AVX2", False, "float32"),
        ("cpu", AVX512_BF16_FLAGS, "AVX512", False, "bfloat16"),
        ("cpu", SPR_AMX_FLAGS, "AVX512", False, "bfloat16"),
        ("cpu", AVX512_BF16_FLAGS - {"avx512_bf16"}, "AVX512", False, "float32"),  # AVX-512 without bf16
        ("cpu", set(), "DEFAULT", False, "float32"),  # no /proc/cpuinfo
        ("cuda", AVX2_FLAGS, "AVX2", True, "bfloat16"),
        ("cuda:1", AVX2_FLAGS, "AVX2", False, "float16"),
    ],
)
def test_choose_dtype_on_recorded_machines(device, flags, capability, cuda_bf16, dtype) -> None:
    chosen, why = choose_dtype(device, flags, capability, cuda_bf16)
    assert chosen == dtype and why


def test_auto_on_this_machine_is_printed_once_with_the_reason() -> None:
    from fastforward.hardware import cpu_flags, resolve_dtype

    dtype, why = resolve_dtype("auto", "cpu")
    native = bool({"avx512_bf16", "amx_bf16"} & cpu_flags())
    assert dtype == ("bfloat16" if native else "float32") and why
    assert resolve_dtype("float16", "cpu") == ("float16", None)


def test_training_precision_auto_follows_the_dtype_choice() -> None:
    """Trainers autocast to bf16 only where bf16 is native: emulated bf16 made a CPU training step 10x slower."""
    from fastforward.hardware import resolve_dtype, training_autocast

    assert training_autocast("bf16") == (True, None) and training_autocast("fp32") == (False, None)
    autocast, why = training_autocast("auto", "cpu")
    assert autocast == (resolve_dtype("auto", "cpu")[0] == "bfloat16") and why


def test_threads_leave_the_busy_cores_alone_and_busy_is_reported() -> None:
    assert choose_threads(2, 0.0) == 2
    assert choose_threads(2, 1.0) == 1
    assert choose_threads(2, 1.9) == 1  # never 0
    assert choose_threads(16, 3.2) == 13
    busy = BusyState(cores=2, load1=0.4, other_cores=1.0, top=[("python", 123, 1.0)])
    assert busy.busy and "python (pid 123)" in busy.message()
    assert not BusyState(cores=2, load1=0.3, other_cores=0.1).busy
    assert BusyState(cores=2, load1=3.5, other_cores=0.0).busy  # load average above the core count


def test_busy_state_sees_a_spinning_child(tmp_path: Path) -> None:
    """A CPU-bound process that this test starts (and ends) shows up as other cores in use."""
    from fastforward.hardware import busy_state

    spin = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        state = busy_state(0.5)
    finally:
        spin.kill()  # our own child
        spin.wait()
    assert any(pid == spin.pid for _, pid, _ in state.top) and state.other_cores >= 0.5


def test_the_timing_lock_warns_when_another_process_holds_it(tmp_path: Path) -> None:
    from fastforward.hardware import timing_lock

    lock = tmp_path / "ffbench.lock"
    holder = subprocess.Popen(
        [sys.executable, "-c", f"import fcntl,time; f=open({str(lock)!r},'a'); fcntl.flock(f, fcntl.LOCK_EX); "
         "print('held', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        warning = timing_lock(lock)
    finally:
        holder.kill()
        holder.wait()
    assert warning and f"pid {holder.pid}" in warning


# --------------------------------------------------------------------------- models


def _corrupt_cache(root: Path) -> Path:
    d = root / "models" / "smollm2-135m"
    d.mkdir(parents=True)
    for name in ("config.json", "tokenizer_config.json"):
        (d / name).write_text("{}")
    header = json.dumps({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode()
    (d / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header + b"\0" * 3)
    (d / ".fastforward-complete").write_text("{}")
    return d


def test_a_corrupt_or_partial_cache_is_reported_with_the_fix(tmp_path: Path, monkeypatch) -> None:
    from fastforward.models.cache import cache_state
    from fastforward.models.loading import pull

    monkeypatch.setenv("FASTFORWARD_CACHE", str(tmp_path))
    assert cache_state("smollm2-135m")[0] == "not pulled"
    d = _corrupt_cache(tmp_path)
    state, detail = cache_state("smollm2-135m")
    assert state == "corrupt" and "truncated" in detail and "--force" in detail
    with pytest.raises(FastForwardError, match="corrupt.*models pull smollm2-135m --force"):
        pull("smollm2-135m")
    (d / ".fastforward-complete").unlink()
    assert cache_state("smollm2-135m")[0] == "partial"
    listed = _cli("models", "list", env={**os.environ, "FASTFORWARD_CACHE": str(tmp_path)})
    assert "smollm2-135m" in listed.stdout and "[partial:" in listed.stdout


def test_verify_rechecks_the_real_cache() -> None:
    from fastforward.models.loading import verify

    lines = verify("smollm2-135m")
    assert any("SHA-256" in line and "as pinned" in line for line in lines)
    assert any("tensors load, all finite" in line for line in lines)


# --------------------------------------------------------------------------- output


def _result(dtype: str, identical: float | None) -> dict:
    method = {"tokens_per_s": 10.0, "speedup_vs_ar": 1.0, "mean_accepted_tokens": 1.5,
              "identical_to_ar": identical, "samples": 3}  # fmt: skip
    return {
        "model": "m", "dtype": dtype, "dataset": "d", "max_new_tokens": 8, "hardware": "h",
        "methods": {"ar": {**method, "lossless": True}, "pld": {**method, "lossless": True},
                    "typical": {**method, "lossless": False}},
    }  # fmt: skip


def test_the_table_separates_fp32_exactness_from_bf16_agreement() -> None:
    bf16 = markdown_table(_result("bfloat16", 0.4))
    assert "same tokens as AR (bfloat16)" in bf16 and "yes (exact in fp32 tests)" in bf16
    assert "**no (lossy)**" in bf16 and "| 40% |" in bf16
    assert "top-1 and top-2 logits" in bf16 and "--dtype float32" in bf16
    fp32 = markdown_table(_result("float32", 1.0))
    assert "must reach 100%" in fp32 and "top-1" not in fp32
    assert "n/a (sampling)" in markdown_table(_result("bfloat16", None))


def test_the_table_says_which_widths_ran_compiled() -> None:
    """A compiled run's table names its graphs' widths; one whose wide package did not fit says that every
    wider step ran eagerly (the 1.5B pair's first bench, session 60); an eager run says nothing of graphs."""
    eager = {**_result("float32", 1.0), "engine": "eager", "compiled_widths": [1, 8]}
    assert "Compiled graphs" not in markdown_table(eager)
    two = markdown_table({**_result("float32", 1.0), "engine": "compiled", "compiled_widths": [1, 8]})
    assert "Compiled graphs for 1, 8 fed tokens" in two and "more than 8 runs eagerly." in two
    one = markdown_table({**_result("bfloat16", 1.0), "engine": "compiled", "compiled_widths": [1]})
    assert "every wider step of a method ran eagerly" in one


def test_score_explains_datasets_it_cannot_score(tmp_path: Path) -> None:
    result = {
        "methods": {
            "ar": {"per_sample": [{"id": "mtbench-81", "dataset": "mtbench", "turn": 0, "text": "x"}]}
        }
    }
    path = tmp_path / "r.json"
    path.write_text(json.dumps(result))
    proc = _cli("score", str(path))
    assert proc.returncode == 0, proc.stderr
    assert "mtbench: 1 generations; not scored: open-ended" in proc.stdout and "| method |" not in proc.stdout
    assert json.loads(path.read_text()) == result  # left unchanged


def test_user_jsonl_accepts_every_documented_form(tmp_path: Path) -> None:
    path = tmp_path / "mine.jsonl"
    records = [
        {"prompt": "hello", "id": 7},
        {"question": "2+2?", "answer": 4},
        {"turns": ["a", "b"]},
        {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
                      {"role": "assistant", "content": "r"}, {"role": "user", "content": "v"}]},
    ]  # fmt: skip
    path.write_bytes(
        b"\xef\xbb\xbf" + "\n\n".join(json.dumps(r) for r in records).encode()
    )  # BOM, blank lines
    got = load_dataset("ignored", data_path=str(path))
    assert [s.turns for s in got] == [("hello",), ("2+2?",), ("a", "b"), ("u", "v")]
    assert got[0].id == "7" and got[1].answer == "4"


@pytest.mark.parametrize(
    ("limit", "dtype", "kept"),
    [
        ("", "bfloat16", {"amx_bf16", "avx512_bf16", "avx512f"}),
        ("AVX2", "float32", {"avx2"}),  # an AVX2-only machine, reproduced on an AMX one
        ("AVX512_CORE_VNNI", "float32", {"avx512f", "avx512_vnni"}),
        ("AVX512_CORE_BF16", "bfloat16", {"avx512_bf16", "avx512f"}),
        ("AVX512_CORE_AMX", "bfloat16", {"amx_bf16", "avx512_bf16"}),
    ],
)
def test_onednn_isa_cap_limits_the_flags_the_dtype_is_chosen_from(limit, dtype, kept) -> None:
    from fastforward.hardware import limit_flags

    flags = limit_flags(set(SPR_AMX_FLAGS), limit)
    assert kept <= flags
    assert flags <= set(SPR_AMX_FLAGS)
    if limit == "AVX2":
        assert not any(f.startswith(("avx512", "amx")) for f in flags)
    assert choose_dtype("cpu", flags, "AVX2" if limit == "AVX2" else "AVX512", False)[0] == dtype


def test_a_second_ar_row_sets_the_noise_floor_each_speedup_is_read_against() -> None:
    """With an ``ar:twin`` row the table says how far AR moved against itself and which methods sit inside
    that band; the band reaches the twin's furthest interval end, on either side of 1.00x."""
    from fastforward.bench.report import noise_floor, within_noise

    result = _result("float32", 1.0)
    result["methods"]["pld"].update(speedup_vs_ar=1.35)
    result["methods"]["typical"].update(speedup_vs_ar=0.975)
    result["methods"]["ar:twin"] = {**result["methods"]["ar"], "speedup_vs_ar": 1.01,
                                    "speedup_interval_90": [0.97, 1.02]}  # fmt: skip
    floor = noise_floor(result["methods"])
    assert floor == {"row": "ar:twin", "speedup": 1.01, "band": [0.97, 1.03]}
    assert within_noise(result["methods"], floor) == ["typical"]  # not ar, not the twin, not pld
    table = markdown_table(result)
    assert "Noise floor: ar:twin" in table and "0.97-1.03x" in table and "(inside it: typical)" in table
    result["methods"]["typical"].update(speedup_vs_ar=0.96)
    assert "(inside it: none)" in markdown_table(result)
    assert noise_floor(_result("float32", 1.0)["methods"]) is None
    result["methods"] = {"ar:b": {**result["methods"]["ar"], "speedup_vs_ar": 0.9}, **result["methods"]}
    assert noise_floor(result["methods"])["row"] == "ar:twin"  # --noise-floor's row, wherever it sits
    assert "Noise floor" not in markdown_table(_result("float32", 1.0))


def test_describe_names_an_isa_cap(monkeypatch) -> None:
    from fastforward.hardware import describe

    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "avx2")
    assert "capped: ONEDNN_MAX_CPU_ISA=AVX2" in describe()


def test_the_table_says_when_a_method_ran_mostly_ar_steps() -> None:
    """A method that got most of its tokens from AR steps (its gate or gamma_auto fell back, its drafter found
    nothing) is marked and explained, so its ~1.00x does not read as the method's own result; results
    written before the split still render, and without token counts the share of forwards decides."""
    result = _result("float32", 1.0)
    result["methods"]["pld"].update(ar_step_share=0.1)
    result["methods"]["typical"].update(ar_step_share=0.9)
    result["methods"]["ar"].update(ar_step_share=1.0)
    table = markdown_table(result)
    assert "| parallel steps |" in table
    assert "| pld | " in table and "| 90% |" in table  # pld: 10% AR steps, no mark
    assert "| typical † |" in table and "| 10% |" in table
    assert "most tokens from plain AR steps (typical 90% of tokens)" in table
    # more AR forwards than wide ones, but the wide ones gave most of the text: no mark (session 59's pld)
    result["methods"]["pld"].update(ar_step_share=0.56, ar_steps=56, new_tokens=300)
    assert "| pld | " in markdown_table(result) and "| 44% |" in markdown_table(result)
    result["methods"]["pld"].update(ar_steps=240)  # 80% of the tokens from AR steps: marked
    assert "| pld † |" in markdown_table(result) and "pld 80% of tokens" in markdown_table(result)
    assert "| ar | " in table and "ar †" not in table  # AR is AR: no mark, no share
    twin = _result("float32", 1.0)
    twin["methods"]["ar:twin"] = {**twin["methods"]["ar"], "ar_step_share": 1.0}
    assert "| ar:twin | " in markdown_table(twin) and "reference (a second AR row)" in markdown_table(twin)
    old = markdown_table(_result("float32", 1.0))
    assert "†" not in old and "| - |" in old
    auto = _result("float32", 1.0)
    auto["methods"]["auto"] = {**auto["methods"]["pld"], "auto_choice": "lookahead"}
    assert "| auto → lookahead |" in markdown_table(auto)


def test_a_frozen_copy_of_the_tree_still_names_its_revision() -> None:
    """``git archive`` writes its commit into hardware.py (.gitattributes: export-subst), so a results file
    timed from an archived copy names the code it ran; a checkout's placeholder names nothing."""
    from fastforward.hardware import archived_revision

    assert archived_revision("$Format:%H$") is None  # the placeholder, as a checkout holds it
    assert archived_revision("9cc296e0b1") == "9cc296e0b1" and archived_revision("") is None
    attributes = (Path(__file__).resolve().parents[1] / ".gitattributes").read_text()
    assert "src/fastforward/hardware.py export-subst" in attributes

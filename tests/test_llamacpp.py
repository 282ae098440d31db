"""``fastforward bench --llamacpp``: llama.cpp's AR as a reference row of the same run, on the same prompts
(:mod:`fastforward.bench.llamacpp`). llama.cpp itself is not built in CI, so the row is driven through a
stand-in ``llama-completion`` that answers and prints timings the way llama.cpp does; what is checked is
ours: the GGUF chosen per precision, the timings parsed, the row in the table, and one-line errors."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from fastforward.bench.llamacpp import (
    BUILD_HINT,
    VERSION,
    binary,
    convert_hint,
    gguf_file,
    gguf_type,
    parse_speculative,
    parse_times,
    run_tool,
    spoken_after,
)
from fastforward.cli import main
from fastforward.errors import FastForwardError

PERF = """0.03.188.870 I common_perf_print:        load time =    1332.41 ms
0.03.188.873 I common_perf_print: prompt eval time =    100.00 ms /    15 tokens (   6.67 ms per token)
0.03.188.874 I common_perf_print:        eval time =     300.00 ms /     6 runs   (   50.00 ms per token)
0.03.188.875 I common_perf_print:       total time =    1825.03 ms /    21 tokens
"""


def test_parse_times_adds_prompt_eval_and_eval() -> None:
    assert parse_times(PERF) == (0.4, 6)
    with pytest.raises(FastForwardError, match="no timings"):
        parse_times("load time = 1 ms\n")


def test_the_gguf_matches_the_runs_precision() -> None:
    assert gguf_type("float32", "full") == "F32" and gguf_type("bfloat16", "full") == "BF16"
    assert gguf_type("float32", "int8") == "Q8_0" and gguf_type("float32", "int4") == "Q4_1"
    with pytest.raises(FastForwardError, match="no llama.cpp weight type"):
        gguf_type("float16", "full")


def _fake_build(root: Path, answer: str) -> Path:
    """A llama.cpp build folder whose llama-completion prints ``answer`` and llama.cpp's perf lines."""
    bindir = root / f"llama_cpp_python-{VERSION}" / "vendor" / "llama.cpp" / "build" / "bin"
    bindir.mkdir(parents=True)
    exe = bindir / "llama-completion"
    (root / "perf.txt").write_text(PERF)
    exe.write_text(f"#!/bin/sh\nprintf '%s [end of text]\\n' '{answer}'\ncat {root / 'perf.txt'} >&2\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    (root / "smollm2-135m-F32.gguf").write_bytes(b"GGUF")
    return exe


def test_a_missing_build_is_one_line_with_the_command(tmp_path: Path) -> None:
    with pytest.raises(FastForwardError, match="not built") as err:
        binary(tmp_path)
    assert BUILD_HINT in str(err.value) and "\n" not in str(err.value)


def test_a_build_for_another_cpu_is_one_line_that_says_rebuild(tmp_path: Path) -> None:
    """A cache folder moved to a CPU without the instructions its native build used (seen: a build made on
    one AMX host stopped on Q8_0 weights on another) dies of SIGILL: one line that says so and how to
    rebuild, not a bare return code."""
    exe = tmp_path / "llama-completion"
    exe.write_text("#!/bin/sh\nkill -ILL $$\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    with pytest.raises(FastForwardError, match="illegal instruction") as err:
        run_tool([str(exe)], exe)
    assert BUILD_HINT in str(err.value) and "\n" not in str(err.value)


def test_bench_gets_a_llamacpp_row_timed_by_llamacpp(tmp_path: Path, capsys) -> None:
    _fake_build(tmp_path / "llama", "The answer is 4.")
    out = tmp_path / "run.json"
    argv = [
        "bench", "--dataset", "gsm8k", "--limit", "1", "--max-new-tokens", "8", "--dtype", "float32",
        "--path", "default", "--methods", "ar", "--warmup", "0", "--llamacpp", str(tmp_path / "llama"),
        "--out", str(out),
    ]  # fmt: skip
    assert main(argv) == 0
    row = json.loads(out.read_text())["methods"]["llamacpp"]
    # the prompt eval's token and 6 eval runs over its own prompt eval + eval time, not the process's
    assert row["tokens_per_s"] == pytest.approx(7 / 0.4)
    assert row["lossless"] is None and row["ar_step_share"] == 1.0
    table = out.with_suffix(".md").read_text()
    assert "| llamacpp |" in table and "†" not in table.split("| llamacpp |")[1].split("\n")[0]


def test_bench_refuses_llamacpp_without_its_gguf(tmp_path: Path) -> None:
    _fake_build(tmp_path / "llama", "x")
    (tmp_path / "llama" / "smollm2-135m-F32.gguf").unlink()
    argv = ["bench", "--dataset", "gsm8k", "--limit", "1", "--max-new-tokens", "4", "--dtype", "float32",
            "--path", "default", "--methods", "ar", "--llamacpp", str(tmp_path / "llama")]  # fmt: skip
    assert main(argv) == 2


SPEC = """0.00.829.796 I encoded   17 tokens in    0.041 seconds, speed:  409.905 t/s
0.00.829.798 I decoded   36 tokens in    0.488 seconds, speed:   73.701 t/s
0.00.829.811 I n_draft   = 3
0.00.829.811 I n_predict = 36
0.00.829.811 I n_drafted = 27
0.00.829.811 I n_accept  = 20
0.00.829.811 I accept    = 74.074%
"""


def test_parse_speculative_reads_its_summary() -> None:
    seconds, decoded, drafted, accepted = parse_speculative(SPEC)
    assert seconds == pytest.approx(0.529) and (decoded, drafted, accepted) == (36, 27, 20)
    with pytest.raises(FastForwardError, match="no summary"):
        parse_speculative(SPEC.split("0.00.829.811 I n_draft")[0])


def test_the_speculative_answer_is_what_follows_the_echoed_prompt() -> None:
    assert spoken_after("\n\n<|user|>hi<|end|>\nHello!\n\n", "<|user|>hi<|end|>\n") == "Hello!"
    assert spoken_after("Hello!\n", "not echoed") == "Hello!"
    # llama-speculative-simple 0.3.36 echoes all of the prompt but its last token ("\n" after "assistant")
    assert spoken_after("\n\n<|u|>hi<|e|>\n<|u|>assistantHello!\n", "<|u|>hi<|e|>\n<|u|>assistant\n",
                        "<|u|>hi<|e|>\n<|u|>assistant") == "Hello!"  # fmt: skip


def test_each_registry_model_has_its_own_gguf_and_hint(tmp_path: Path) -> None:
    (tmp_path / "qwen2.5-coder-1.5b-Q8_0.gguf").write_bytes(b"GGUF")
    assert gguf_file(tmp_path, "qwen2.5-coder-1.5b", "Q8_0").name == "qwen2.5-coder-1.5b-Q8_0.gguf"
    with pytest.raises(FastForwardError, match="MODEL=qwen2.5-coder-0.5b bash") as err:
        gguf_file(tmp_path, "qwen2.5-coder-0.5b", "Q8_0")
    assert "\n" not in str(err.value)
    shipped = tmp_path / "shipped.gguf"
    shipped.write_bytes(b"GGUF")
    assert gguf_file(tmp_path, "smollm2-135m", "Q4_1", shipped) == shipped
    assert "MODEL=" not in convert_hint("smollm2-135m")


def test_a_build_without_the_speculative_program_is_one_line(tmp_path: Path) -> None:
    _fake_build(tmp_path / "llama", "x")
    with pytest.raises(FastForwardError, match="no llama-speculative-simple"):
        binary(tmp_path / "llama", "llama-speculative-simple")


def test_bench_refuses_llamacpp_for_a_model_outside_the_registry(tmp_path: Path) -> None:
    _fake_build(tmp_path / "llama", "x")
    argv = ["bench", "--model", str(tmp_path / "mine"), "--dataset", "gsm8k", "--limit", "1",
            "--methods", "ar", "--llamacpp", str(tmp_path / "llama")]  # fmt: skip
    assert main(argv) == 2


def _fake_speculative(root: Path, answer: str) -> None:
    """Beside :func:`_fake_build`'s program: a llama-speculative-simple that echoes the prompt file (its -f
    argument), answers and prints llama.cpp's summary."""
    exe = (
        root
        / f"llama_cpp_python-{VERSION}"
        / "vendor"
        / "llama.cpp"
        / "build"
        / "bin"
        / "llama-speculative-simple"
    )
    (root / "spec.txt").write_text(SPEC)
    exe.write_text(
        "#!/bin/sh\n"
        'while [ "$#" -gt 0 ]; do [ "$1" = -f ] && f=$2; shift; done\n'
        f"printf '\\n\\n'; cat \"$f\"; printf '%s\\n\\n' '{answer}'\ncat {root / 'spec.txt'} >&2\n"
    )
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)


def test_bench_with_a_draft_gets_a_llamacpp_sd_row(tmp_path: Path) -> None:
    root = tmp_path / "llama"
    _fake_build(root, "The answer is 4.")
    _fake_speculative(root, "The answer is 4.")
    out = tmp_path / "run.json"
    argv = [
        "bench", "--draft", "smollm2-135m", "--dataset", "gsm8k", "--limit", "1", "--max-new-tokens", "8",
        "--dtype", "float32", "--path", "default", "--methods", "ar,sd", "--warmup", "0",
        "--llamacpp", str(root), "--out", str(out),
    ]  # fmt: skip
    assert main(argv) == 0
    methods = json.loads(out.read_text())["methods"]
    assert set(methods) == {"ar", "sd", "llamacpp", "llamacpp_sd"}
    row = methods["llamacpp_sd"]
    assert row["tokens_per_s"] == pytest.approx(36 / 0.529)
    # 36 tokens in 36 - 20 target forwards, each fed its share of the 27 drafted tokens and the last one
    assert row["target_forwards"] == 16 and row["mean_accepted_tokens"] == pytest.approx(36 / 16)
    assert row["ar_step_share"] == 0.0 and row["lossless"] is None

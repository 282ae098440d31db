"""``fastforward bench --llamacpp``: llama.cpp's AR as a reference row of the same run, on the same prompts
(:mod:`fastforward.bench.llamacpp`). llama.cpp itself is not built in CI, so the row is driven through a
stand-in ``llama-completion`` that answers and prints timings the way llama.cpp does; what is checked is
ours: the GGUF chosen per precision, the timings parsed, the row in the table, and one-line errors."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from fastforward.bench.llamacpp import BUILD_HINT, VERSION, binary, gguf_type, parse_times
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
    (root / "smollm2-F32.gguf").write_bytes(b"GGUF")
    return exe


def test_a_missing_build_is_one_line_with_the_command(tmp_path: Path) -> None:
    with pytest.raises(FastForwardError, match="not built") as err:
        binary(tmp_path)
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
    (tmp_path / "llama" / "smollm2-F32.gguf").unlink()
    argv = ["bench", "--dataset", "gsm8k", "--limit", "1", "--max-new-tokens", "4", "--dtype", "float32",
            "--path", "default", "--methods", "ar", "--llamacpp", str(tmp_path / "llama")]  # fmt: skip
    assert main(argv) == 2

"""Every bad input a user can give ends in one line on stderr and exit code 2, never a traceback.

A table of bad flags, JSONL records, method options, model paths and output paths goes through the real CLI
(``python -m fastforward``), each in its own subprocess. All of them must fail before any model loads, so the
whole table runs in well under a minute: the subprocesses run two at a time (a thread pool waiting on them),
once per module, and each case then asserts its own outcome.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

HI = "hi"
CORRUPT_CACHE = {"model-corrupt-cache"}  # cases run with FASTFORWARD_CACHE pointing at a corrupt cache
AVX2_CAP = {"w8a8-without-vnni"}  # cases run under ONEDNN_MAX_CPU_ISA=AVX2: no VNNI on any CPU

# (id, argv, a fragment the one error line must contain). Paths in argv are relative to a scratch directory
# that the `scratch` fixture fills with the files named here.
CASES: list[tuple[str, list[str], str]] = [
    # ---- flags
    ("device-foo", ["bench", "--device", "foo"], "--device must be cpu, cuda or cuda:N, got 'foo'"),
    ("device-cuda-absent", ["bench", "--device", "cuda"], "no CUDA GPU"),
    ("threads-negative", ["bench", "--threads", "-2"], "--threads must be >= 1, got -2"),
    ("threads-zero", ["generate", "--threads", "0", HI], "--threads must be >= 1, got 0"),
    ("threads-text", ["bench", "--threads", "abc"], "invalid int value: 'abc'"),
    ("warmup-negative", ["bench", "--warmup", "-1"], "--warmup must be >= 0, got -1"),
    ("limit-zero", ["bench", "--limit", "0"], "--limit must be >= 1"),
    ("max-new-tokens-zero", ["generate", "--max-new-tokens", "0", HI], "--max-new-tokens must be >= 1"),
    ("temperature-negative", ["generate", "--temperature", "-1", HI], "--temperature must be >= 0"),
    ("top-p-above-1", ["bench", "--top-p", "1.5"], "--top-p must be in (0, 1]"),
    ("top-k-negative", ["bench", "--top-k", "-1"], "--top-k must be >= 0"),
    ("dtype-unknown", ["generate", "--dtype", "int8", HI], "invalid choice: 'int8'"),
    ("path-unknown", ["generate", "--path", "foo", HI], "invalid choice: 'foo'"),
    ("llamacpp-not-built", ["bench", "--llamacpp", "nowhere"], "llama.cpp is not built in nowhere"),
    ("weights-unknown", ["generate", "--weights", "int2", HI], "invalid choice: 'int2'"),
    ("buckets-odd-width", ["bench", "--buckets", "1,3"], "--buckets takes auto or widths from 1,2,4,8,16,32"),
    ("buckets-empty", ["generate", "--buckets", ",", HI], "--buckets takes auto or widths"),
    ("w8a8-without-vnni", ["generate", "--weights", "w8a8", HI], "needs VNNI"),
    ("weights-with-path", ["bench", "--weights", "int8", "--path", "prepacked"], "takes no kernel path"),
    (
        "weights-with-fp32-head",
        ["generate", "--weights", "int4", "--fp32-logits", HI],
        "leave out --fp32-logits",
    ),
    ("methods-empty", ["bench", "--methods", ","], "--methods is empty"),
    ("batch-size-negative", ["bench", "--batch-size", "-1"], "--batch-size must be >= 1"),
    ("token-budget-alone", ["bench", "--token-budget", "100"], "--token-budget needs --batch-size"),
    (
        "batch-resume",
        ["bench", "--batch-size", "2", "--resume", "--out", "b.json"],
        "--resume is for the latency",
    ),
    (
        "batch-noise-floor",
        ["bench", "--batch-size", "2", "--noise-floor"],
        "--noise-floor is for the latency",
    ),
    ("methods-unknown", ["bench", "--methods", "ar,warp-drive"], "unknown method 'warp-drive'"),
    ("methods-twice", ["bench", "--methods", "ar,pld,pld"], "lists a method twice"),
    ("method-unknown", ["generate", "--method", "warp", HI], "invalid choice: 'warp'"),
    ("dataset-unknown", ["bench", "--dataset", "wikitext"], "unknown dataset 'wikitext'"),
    ("split-unknown", ["bench", "--dataset", "gsm8k", "--split", "test"], "unknown GSM8K split 'test'"),
    # ---- structured output: checked before the model loads
    ("json-schema-missing", ["generate", "--json-schema", "nope.json", HI], "--json-schema: no such file"),
    ("json-schema-invalid", ["generate", "--json-schema", "bad_schema.json", HI], "invalid JSON schema"),
    ("json-schema-not-json", ["bench", "--json-schema", "not_json.json"], "not valid JSON"),
    ("regex-invalid", ["generate", "--regex", "(", HI], "invalid regex"),
    ("constraints-two", ["generate", "--regex", "a", "--json-object", HI], "not allowed with argument"),
    ("prompt-empty", ["generate", ""], "the prompt is empty"),
    ("prompt-blank", ["generate", "   "], "the prompt is empty"),
    ("prompt-missing", ["generate"], "the following arguments are required: prompt"),
    ("flag-unknown", ["bench", "--fast"], "unrecognized arguments: --fast"),
    ("command-missing", [], "required: COMMAND"),
    ("timeout-zero", ["score", "r.json", "--timeout", "0"], "--timeout must be > 0"),
    # ---- JSONL records (--data-path)
    (
        "jsonl-empty-prompt",
        ["bench", "--data-path", "empty_prompt.jsonl"],
        "empty_prompt.jsonl:1: 'prompt' is empty",
    ),
    ("jsonl-blank-question", ["bench", "--data-path", "blank_question.jsonl"], "'question' is empty"),
    (
        "jsonl-messages-string",
        ["bench", "--data-path", "messages_str.jsonl"],
        "'messages' must be a non-empty list",
    ),
    (
        "jsonl-message-no-content",
        ["bench", "--data-path", "no_content.jsonl"],
        "messages[0] has no 'content'",
    ),
    ("jsonl-message-bad-role", ["bench", "--data-path", "bad_role.jsonl"], "messages[0].role must be one of"),
    ("jsonl-messages-no-user", ["bench", "--data-path", "no_user.jsonl"], "no message with role 'user'"),
    (
        "jsonl-turns-number",
        ["bench", "--data-path", "turns_int.jsonl"],
        "'turns' must be a non-empty list of strings",
    ),
    ("jsonl-turns-string", ["bench", "--data-path", "turns_str.jsonl"], 'got a string "Hi"'),
    ("jsonl-turns-empty", ["bench", "--data-path", "turns_empty.jsonl"], "'turns' must be a non-empty list"),
    (
        "jsonl-turn-not-text",
        ["bench", "--data-path", "turns_mixed.jsonl"],
        "'turns[1]' must be a non-empty string",
    ),
    (
        "jsonl-question-number",
        ["bench", "--data-path", "question_int.jsonl"],
        "'question' must be a non-empty string",
    ),
    ("jsonl-two-prompt-keys", ["bench", "--data-path", "two_keys.jsonl"], "has both 'prompt' and 'question'"),
    ("jsonl-no-prompt-key", ["bench", "--data-path", "no_keys.jsonl"], "needs one of 'prompt'"),
    ("jsonl-not-object", ["bench", "--data-path", "array.jsonl"], "expected a JSON object, got a list"),
    ("jsonl-bad-json", ["bench", "--data-path", "bad.jsonl"], "bad.jsonl:2: not valid JSON"),
    ("jsonl-not-utf8", ["bench", "--data-path", "latin1.jsonl"], "not UTF-8 text"),
    ("jsonl-empty-file", ["bench", "--data-path", "empty.jsonl"], "holds no records"),
    (
        "jsonl-answer-object",
        ["bench", "--data-path", "answer_obj.jsonl"],
        "'answer' must be a string or a number",
    ),
    ("jsonl-directory", ["bench", "--data-path", "."], "is a directory; expected a JSONL file"),
    ("jsonl-missing", ["bench", "--data-path", "missing.jsonl"], "data file not found"),
    # ---- method options, --draft
    ("opt-no-equals", ["bench", "--methods", "ar,pld", "--opt", "gamma"], "--opt expects key=value"),
    (
        "opt-other-method",
        ["generate", "--method", "pld", "--opt", "bits=4", HI],
        "option 'bits' is not used by pld",
    ),
    (
        "opt-block-size-on-pld",
        ["generate", "--method", "pld", "--opt", "block_size=16", HI],
        "not used by pld",
    ),
    (
        "opt-typo",
        ["generate", "--method", "jacobi", "--opt", "blocksize=4", HI],
        "unknown option 'blocksize'",
    ),
    ("opt-on-ar", ["generate", "--method", "ar", "--opt", "gamma=3", HI], "not used by ar"),
    ("opt-no-reader", ["bench", "--methods", "ar,jacobi", "--opt", "gamma=4"], "no method in --methods"),
    (
        "opt-ambiguous",
        ["bench", "--methods", "ar,typical,consultant", "--draft", "smollm2-135m", "--opt", "eps=1"],
        "eps=1 is ambiguous",
    ),  # fmt: skip
    (
        "opt-bad-scope",
        ["bench", "--methods", "ar,jacobi", "--opt", "jacobi:x.block_size=4"],
        "not in --methods",
    ),
    (
        "opt-out-of-range",
        ["bench", "--methods", "ar,jacobi", "--opt", "jacobi.block_size=0"],
        "must be an integer >= 1",
    ),
    ("opt-wrong-type", ["generate", "--method", "pld", "--opt", "gamma=abc", HI], "gamma must be an integer"),
    ("opt-bad-choice", ["generate", "--method", "jacobi", "--opt", "init=zeros", HI], "init must be one of"),
    (
        "draft-unused",
        ["generate", "--method", "pld", "--draft", "smollm2-135m", HI],
        "--draft is not used by pld",
    ),
    ("draft-unused-bench", ["bench", "--methods", "ar,jacobi", "--draft", "smollm2-135m"], "drop --draft"),
    ("draft-missing", ["generate", "--method", "sd", HI], "method 'sd' needs a draft model"),
    ("heads-missing", ["bench", "--methods", "ar,chimera"], "needs a trained draft: --opt heads=PATH"),
    (
        "heads-not-a-dir",
        ["generate", "--method", "chimera", "--opt", "heads=nowhere", HI],
        "no such directory",
    ),
    ("methods-unknown-name", ["methods", "warp"], "unknown method 'warp'"),
    (
        "sd-sample-greedy",
        ["bench", "--methods", "ar,sd-sample", "--draft", "smollm2-135m"],
        "sampling decoding only",
    ),
    # ---- model paths
    ("model-missing", ["bench", "--model", "/nonexistent/model"], "model not found"),
    ("model-empty", ["bench", "--model", ""], "model not found"),
    ("model-not-gguf", ["generate", "--model", "weights.bin", HI], "is not a .gguf file"),
    ("model-empty-dir", ["bench", "--model", "emptydir"], "without config.json"),
    (
        "draft-missing-path",
        ["generate", "--method", "sd", "--draft", "/nonexistent", HI],
        "--draft '/nonexistent'",
    ),
    ("model-corrupt-cache", ["generate", "--model", "smollm2-135m", HI], "is corrupt"),
    ("models-pull-unknown", ["models", "pull", "gpt-9"], "invalid choice: 'gpt-9'"),
    ("models-verify-unknown", ["models", "verify", "gpt-9"], "unknown model 'gpt-9'"),
    # ---- output paths and resume
    ("out-suffix", ["bench", "--out", "result.txt"], "expected a path ending in .json"),
    ("out-no-suffix", ["bench", "--out", "result"], "expected a path ending in .json"),
    ("out-parent-is-file", ["bench", "--out", "weights.bin/r.json"], "is a file, not a directory"),
    ("out-is-directory", ["bench", "--out", "outdir.json"], "is a directory"),
    ("out-read-only-dir", ["bench", "--out", "/proc/fastforward/r.json"], "--out"),
    ("resume-without-out", ["bench", "--resume"], "--resume needs --out"),
    (
        "resume-other-options",
        [
            "bench",
            "--dataset",
            "gsm8k",
            "--limit",
            "1",
            "--max-new-tokens",
            "5",
            "--dtype",
            "float32",
            "--out",
            "run.json",
            "--resume",
        ],
        "--max-new-tokens differs from the interrupted run",
    ),  # fmt: skip
    (
        "interrupted-run-no-resume",
        [
            "bench",
            "--dataset",
            "gsm8k",
            "--limit",
            "1",
            "--max-new-tokens",
            "8",
            "--dtype",
            "float32",
            "--out",
            "run.json",
        ],
        "add --resume",
    ),  # fmt: skip
    (
        "resume-garbage-log",
        ["bench", "--dataset", "gsm8k", "--limit", "1", "--out", "junk.json", "--resume"],
        "not a fastforward sample log",
    ),  # fmt: skip
    ("trace-out-parent-is-file", ["trace", "--out", "weights.bin/t.png", HI], "is a file, not a directory"),
    ("score-not-a-result", ["score", "not_result.json"], "not a bench result"),
    ("score-missing", ["score", "missing.json"], "bench result not found"),
    ("report-directory", ["report", "emptydir"], "emptydir is a directory"),
    # ---- a user's file in another encoding, for every command that reads one
    (
        "train-cllm-not-utf8",
        ["train-cllm", "--data", "latin1.jsonl", "--out", "m", "--mixed-precision", "no"],
        "not UTF-8 text",
    ),
    ("collect-not-utf8", ["collect", "--data-path", "latin1.jsonl", "--out", "t.jsonl"], "not UTF-8 text"),
    ("report-not-utf8", ["report", "latin1.jsonl"], "not UTF-8 text"),
    ("score-not-utf8", ["score", "latin1.jsonl"], "not UTF-8 text"),
    (
        "chimera-report-not-utf8",
        ["chimera-report", "--heads", "latin1.jsonl", "--out", "s.json"],
        "not UTF-8",
    ),
    (
        "eval-cllm-not-utf8",
        ["eval-cllm", "--cllm", "smollm2-135m", "--data-path", "latin1.jsonl"],
        "not UTF-8",
    ),
    (
        "resume-not-utf8",
        ["bench", "--dataset", "gsm8k", "--limit", "1", "--out", "latin.json", "--resume"],
        "cannot read the sample log",
    ),  # fmt: skip
]


def _lines(*records: object) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def _fill(d: Path) -> None:
    """The files the cases name."""
    files = {
        "empty_prompt.jsonl": _lines({"prompt": ""}),
        "bad_schema.json": json.dumps({"type": "object", "properties": {"a": {"type": "integr"}}}),
        "not_json.json": "{type: object",
        "blank_question.jsonl": _lines({"question": "  \n"}),
        "messages_str.jsonl": _lines({"messages": "hello"}),
        "no_content.jsonl": _lines({"messages": [{"role": "user"}]}),
        "bad_role.jsonl": _lines({"messages": [{"role": "bot", "content": "x"}]}),
        "no_user.jsonl": _lines({"messages": [{"role": "system", "content": "be brief"}]}),
        "turns_int.jsonl": _lines({"turns": 5}),
        "turns_str.jsonl": _lines({"turns": "Hi"}),
        "turns_empty.jsonl": _lines({"turns": []}),
        "turns_mixed.jsonl": _lines({"turns": ["first", 2]}),
        "question_int.jsonl": _lines({"question": 7}),
        "two_keys.jsonl": _lines({"prompt": "a", "question": "b"}),
        "no_keys.jsonl": _lines({"text": "a"}),
        "array.jsonl": _lines([1, 2]),
        "bad.jsonl": _lines({"prompt": "fine"}) + "{not json\n",
        "empty.jsonl": "",
        "answer_obj.jsonl": _lines({"prompt": "2+2?", "answer": {"value": 4}}),
        "weights.bin": "x",
        "not_result.json": json.dumps({"model": "m"}),
        "junk.samples.jsonl": "hello\n",
    }
    for name, text in files.items():
        (d / name).write_text(text, encoding="utf-8")
    (d / "latin1.jsonl").write_bytes('{"prompt": "café"}\n'.encode("latin-1"))
    (d / "latin.samples.jsonl").write_bytes('{"format": "café"}\n'.encode("latin-1"))
    (d / "emptydir").mkdir()
    (d / "outdir.json").mkdir()
    # a corrupt cache of the default model: marker and files present, weights truncated
    cached = d / "cache" / "models" / "smollm2-135m"
    cached.mkdir(parents=True)
    for name in ("config.json", "tokenizer_config.json"):
        (cached / name).write_text("{}")
    header = json.dumps({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode()
    (cached / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header + b"\0" * 5)
    (cached / ".fastforward-complete").write_text("{}")
    _interrupted_run(d)


def _interrupted_run(d: Path) -> None:
    """A sample log of an interrupted ``bench ... --max-new-tokens 8 --out run.json`` with one finished turn."""
    from fastforward.bench.samplelog import FORMAT
    from fastforward.cli import build_parser
    from fastforward.cli.bench import identity
    from fastforward.data import load_dataset

    argv = ["bench", "--dataset", "gsm8k", "--limit", "1", "--max-new-tokens", "8", "--dtype", "float32"]
    args = build_parser("bench").parse_args([*argv, "--out", "run.json"])
    ident = identity(args, "float32", [s.id for s in load_dataset("gsm8k", 1)])
    turn = {"index": 0, "id": "gsm8k-0", "turn": 0, "assistant": "x", "methods": {}}
    (d / "run.samples.jsonl").write_text(_lines({"format": FORMAT, "identity": ident}, turn))


def _run(case_id: str, argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    if case_id in CORRUPT_CACHE:
        env["FASTFORWARD_CACHE"] = str(cwd / "cache")
    if case_id in AVX2_CAP:  # and the inductor folder of its own ISA, not the session's (tests/conftest.py)
        env["ONEDNN_MAX_CPU_ISA"] = "AVX2"
        env.pop("TORCHINDUCTOR_CACHE_DIR", None)
    return subprocess.run(
        [sys.executable, "-m", "fastforward", *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("bad_inputs")
    _fill(d)
    return d


@pytest.fixture(scope="module")
def outcomes(scratch: Path) -> dict[str, subprocess.CompletedProcess]:
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {case_id: pool.submit(_run, case_id, argv, scratch) for case_id, argv, _ in CASES}
    return {case_id: f.result() for case_id, f in futures.items()}


def test_the_table_is_large_and_every_id_unique() -> None:
    assert len(CASES) >= 40
    assert len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize(("case_id", "fragment"), [(c[0], c[2]) for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_and_exit_2(outcomes, case_id: str, fragment: str) -> None:
    proc = outcomes[case_id]
    lines = proc.stderr.splitlines()
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("fastforward: error: "), lines[0]
    assert fragment in lines[0], lines[0]


def test_refused_runs_leave_the_interrupted_log_and_write_nothing(outcomes, scratch: Path) -> None:
    """Refusing to resume (other options) or to start over (no --resume) keeps the finished turn, and no
    refused bench wrote a result."""
    assert (
        outcomes["interrupted-run-no-resume"].returncode == outcomes["resume-other-options"].returncode == 2
    )
    assert len((scratch / "run.samples.jsonl").read_text().splitlines()) == 2
    assert not list(scratch.glob("*.md")) and not (scratch / "run.json").exists()


def test_a_chimera_draft_config_in_another_encoding_is_one_line(tmp_path: Path, tiny) -> None:
    """``--opt heads=DIR`` reads DIR's config: a latin-1 file there is a FastForwardError naming it."""
    from fastforward.chimera.checkpoint import CONFIG_FILE, WEIGHTS_FILE, load_draft
    from fastforward.errors import FastForwardError

    (tmp_path / CONFIG_FILE).write_bytes('{"chimera": {"name": "café"}}'.encode("latin-1"))
    (tmp_path / WEIGHTS_FILE).write_bytes(b"")
    with pytest.raises(FastForwardError, match="not UTF-8 text") as e:
        load_draft(tmp_path, tiny.model)
    assert "\n" not in str(e.value)

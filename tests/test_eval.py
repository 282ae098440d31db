"""Quality scoring: code extraction, the subprocess sandbox (pass, fail, infinite loop, memory bomb) and
GSM8K / HumanEval scoring of a bench JSON written back in place."""

from __future__ import annotations

import json

from fastforward.data import load_dataset
from fastforward.eval.humaneval import build_program, check_completion, extract_code
from fastforward.eval.sandbox import run_python
from fastforward.eval.score import score_file

META = {
    "prompt": 'def add(a, b):\n    """Return a + b."""\n',
    "test": "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(-1, 1) == 0\n",
    "entry_point": "add",
}


def test_sandbox_passes_a_correct_completion_and_fails_a_wrong_one():
    ok = check_completion(META, "```python\ndef add(a, b):\n    return a + b\n```")
    assert ok.passed and ok.status == "passed"
    bad = check_completion(META, "```python\ndef add(a, b):\n    return a - b\n```")
    assert not bad.passed and bad.status == "failed" and "AssertionError" in bad.detail


def test_sandbox_kills_an_infinite_loop_and_a_memory_bomb():
    loop = check_completion(META, "    while True:\n        pass\n", timeout_s=2)
    assert not loop.passed and loop.status == "timeout"
    bomb = run_python("x = bytearray(4 << 30)\n", timeout_s=5, memory_mb=256)
    assert not bomb.passed and "MemoryError" in bomb.detail


def test_sandbox_does_not_run_in_process():
    res = run_python("import os\nos._exit(0)\n")
    assert res.passed  # os._exit in the child must not end the test process


def test_body_completion_continues_the_prompt_and_unterminated_fence_is_taken():
    assert extract_code("Here:\n```python\nprint(1)\n") == "print(1)\n"
    prog = build_program(META["prompt"], "    return a + b\n", META["test"], "add")
    assert prog.startswith(META["prompt"] + "    return a + b") and prog.endswith("check(add)\n")
    assert check_completion(META, "    return a + b\n").passed


def test_score_file_adds_quality_per_method_relative_to_ar(tmp_path):
    g = load_dataset("gsm8k", 2)
    h = load_dataset("humaneval", 1)[0]
    gold0, gold1 = g[0].answer, g[1].answer
    solution = h.meta["prompt"] + "    pass\n"  # a stub that fails the tests
    result = {
        "methods": {
            "ar": {
                "per_sample": [
                    {"id": g[0].id, "turn": 0, "text": f"so\n#### {gold0}"},
                    {"id": g[1].id, "turn": 0, "text": f"#### {gold1}"},
                    {"id": h.id, "turn": 0, "text": f"```python\n{solution}```"},
                    {"id": "mtbench-81", "turn": 0, "text": "unscored"},
                ]
            },
            "consultant": {
                "per_sample": [
                    {"id": g[0].id, "turn": 0, "text": f"#### {gold0}"},
                    {"id": g[1].id, "turn": 0, "text": "#### 123456789"},
                    {"id": h.id, "turn": 0, "text": "no code"},
                ]
            },
        }
    }
    path = tmp_path / "r.json"
    path.write_text(json.dumps(result))
    q = score_file(path, timeout_s=5)
    assert q["ar"]["gsm8k"] == {"correct": 2, "n": 2, "accuracy": 1.0, "relative_to_ar": 1.0}
    assert q["consultant"]["gsm8k"]["accuracy"] == 0.5 and q["consultant"]["gsm8k"]["relative_to_ar"] == 0.5
    assert q["ar"]["humaneval"]["pass_at_1"] == 0.0 and q["ar"]["humaneval"]["relative_to_ar"] is None
    saved = json.loads(path.read_text())
    assert saved["methods"]["consultant"]["quality"] == q["consultant"]
    assert saved["methods"]["consultant"]["per_sample"][1]["correct"] is False
    assert "correct" not in saved["methods"]["ar"]["per_sample"][3]

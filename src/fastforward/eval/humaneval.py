"""HumanEval pass@1 for chat-model completions: extract the code, append the tests, run in the sandbox."""

from __future__ import annotations

import re

from fastforward.eval.sandbox import RunResult, run_python

_FENCE = re.compile(r"```[ \t]*(?:python|py|Python)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL)


def extract_code(completion: str) -> str:
    """The first fenced code block (an unterminated one runs to the end), else the whole text."""
    m = _FENCE.search(completion)
    return m.group(1) if m else completion


def build_program(prompt: str, completion: str, test: str, entry_point: str) -> str:
    """prompt + code + tests + ``check(entry_point)``.

    If the code defines ``entry_point`` itself (chat models usually repeat the whole function) it follows
    the prompt, whose helpers and imports stay available and whose stub it redefines; otherwise the code is
    taken as the body that continues the prompt's function.
    """
    code = extract_code(completion)
    if re.search(rf"^\s*def\s+{re.escape(entry_point)}\s*\(", code, re.MULTILINE):
        body = prompt + "\n\n" + code
    else:
        body = prompt + code
    return f"{body}\n\n{test}\n\ncheck({entry_point})\n"


def check_completion(meta: dict, completion: str, timeout_s: float = 10.0) -> RunResult:
    program = build_program(meta["prompt"], completion, meta["test"], meta["entry_point"])
    return run_python(program, timeout_s=timeout_s)

"""The command-line side of issue 15: ``fastforward generate -`` (prompt on stdin, streamed with whole
characters), ``fastforward chat`` (history, /reset, /quit, a speed line per turn) and ``fastforward serve``
as a real process: it reports its ephemeral port, and on SIGTERM it finishes the reply in flight, stops
accepting and exits with status 0."""

from __future__ import annotations

import io
import json
import queue
import signal
import subprocess
import sys
import threading
from typing import Any

import httpx
import pytest

import fastforward.cli.chat as chat_cli
from fastforward.bench.costs import VERIFY_K
from fastforward.cli import main
from fastforward.core.decoder import GenerationConfig
from fastforward.core.detok import TextStream
from fastforward.data import render_prompt
from fastforward.decoders.registry import build_decoder
from fastforward.models.loading import LoadedModel

FP32 = ["--dtype", "float32", "--threads", "2"]


def test_generate_reads_the_prompt_from_stdin(
    smollm2: LoadedModel, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    question = "Name a fruit in Japanese and Chinese."
    monkeypatch.setattr(sys, "stdin", io.StringIO(question + "\n"))
    assert main(["generate", *FP32, "--max-new-tokens", "12", "-"]) == 0
    ids = render_prompt(smollm2.tokenizer, [{"role": "user", "content": question}])
    tokens = build_decoder("ar", smollm2).generate(ids, GenerationConfig(12, smollm2.eos_token_ids)).tokens
    expected = TextStream(smollm2.tokenizer)
    text = expected.push(tokens) + expected.finish()
    out = capsys.readouterr()
    assert out.out == text + "\n"
    assert "\ufffd" not in out.out
    assert "[ar] " in out.err


def test_generate_refuses_an_empty_stdin_prompt(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("\n"))
    assert main(["generate", *FP32, "-"]) == 2
    assert "the prompt is empty" in capsys.readouterr().err


def test_chat_keeps_history_resets_and_reports_speed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: list[list[dict[str, str]]] = []
    real = chat_cli.render_prompt

    def spy(tok: Any, messages: list[dict[str, str]]) -> list[int]:
        seen.append([dict(m) for m in messages])
        return real(tok, messages)

    settled: list[tuple[int, int]] = []
    monkeypatch.setattr(chat_cli, "render_prompt", spy)
    monkeypatch.setattr(chat_cli, "settle", lambda models, width: settled.append((len(models), width)))
    monkeypatch.setattr(sys, "stdin", io.StringIO("Hi\nAnd then?\n/reset\nHello\n/quit\nnever read\n"))
    assert main(["chat", *FP32, "--method", "pld", "--max-new-tokens", "4", "--system", "Be brief."]) == 0
    assert settled == [
        (1, VERIFY_K)
    ]  # once, before the first turn: pld runs the target alone, verifying blocks
    err = capsys.readouterr().err
    system = {"role": "system", "content": "Be brief."}
    assert [m["content"] for m in seen[0]] == ["Be brief.", "Hi"]
    assert seen[1][0] == system and seen[1][2]["role"] == "assistant" and seen[1][3]["content"] == "And then?"
    assert seen[2] == [system, {"role": "user", "content": "Hello"}]  # /reset forgot the first exchange
    assert len(seen) == 3  # /quit ended the chat
    speed = [line for line in err.splitlines() if line.startswith("[pld]")]
    assert len(speed) == 3 and all("tok/s" in s and "tokens/forward" in s for s in speed)
    assert "(history cleared)" in err


def test_serve_rejects_bad_flags_before_loading(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", *FP32, "--port", "70000"]) == 2
    assert main(["serve", *FP32, "--max-queue", "0"]) == 2
    assert main(["serve", *FP32, "--methods", "ar,warp"]) == 2
    assert main(["serve", *FP32, "--max-batch-size", "0"]) == 2
    assert main(["serve", *FP32, "--token-budget", "-1"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 5 and all(line.startswith("fastforward: error:") for line in err)
    assert "--max-batch-size must be >= 1, got 0" in err[3] and "--token-budget must be >= 0" in err[4]


def test_sigterm_finishes_the_reply_in_flight_and_exits_cleanly() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "fastforward", "serve", *FP32, "--port", "0", "--max-queue", "4"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stderr], daemon=True).start()  # type: ignore[union-attr]
    try:
        url = ""
        while not url:
            line = lines.get(timeout=180)
            if " on http://" in line:
                url = line.rsplit(" on ", 1)[1].strip()
        body = {
            "messages": [{"role": "user", "content": "Tell me about the sea."}],
            "max_tokens": 12,
            "stream": True,
            "stream_options": {"include_usage": True},
            "fastforward": {"ignore_eos": True},
        }
        with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=120) as resp:
            assert resp.status_code == 200
            events = resp.iter_lines()
            for line in events:
                if '"content"' in line and '"content": ""' not in line:
                    break
            proc.send_signal(signal.SIGTERM)  # mid-reply
            rest = [line for line in events if line.startswith("data: ")]
        assert rest[-1] == "data: [DONE]"
        chunks = [json.loads(line[6:]) for line in rest[:-1]]
        assert chunks[-1]["usage"]["completion_tokens"] == 12  # the reply in flight was finished
        assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "length"
        assert proc.wait(timeout=120) == 0
        with pytest.raises(httpx.ConnectError):
            httpx.get(url + "/health")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

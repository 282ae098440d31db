"""``fastforward serve`` end to end: the real SmolLM2 (fp32) behind uvicorn on 127.0.0.1 and an ephemeral
port, driven by the official ``openai`` client and raw HTTP.

Covers: chat (streamed and not) and completions; a lossless method through the server gives the tokens of
offline greedy AR; emoji/CJK streamed == non-streamed; stop strings across chunk boundaries; every bad input
with its status and OpenAI's JSON error shape; API keys; a client that disconnects cancels its generation;
a full queue answers 429 with Retry-After. Replies are kept short (a few tokens) so the file stays quick;
no assertion depends on timing (waits are bounded polls for an event)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import openai
import pytest

from fastforward.core.decoder import GenerationConfig
from fastforward.core.detok import REPLACEMENT, TextStream
from fastforward.data import render_prompt
from fastforward.decoders.registry import build_decoder
from fastforward.models.loading import LoadedModel
from fastforward.serve.app import BackgroundServer, create_app
from fastforward.serve.engine import Engine

LONG = 4000  # a reply that would take minutes: only cancellation can end it quickly


@dataclass
class Served:
    url: str
    engine: Engine
    model: str

    def client(self, api_key: str = "unused") -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url + "/v1", api_key=api_key, max_retries=0, timeout=300)


@pytest.fixture(scope="module")
def served(smollm2: LoadedModel) -> Iterator[Served]:
    engine = Engine(smollm2, method="ar", max_queue=8)
    with BackgroundServer(create_app(engine, smollm2.tokenizer, smollm2.name)) as srv:
        yield Served(srv.url, engine, smollm2.name)


def offline_ar(lm: LoadedModel, messages: list[dict[str, str]], n: int) -> list[int]:
    ids = render_prompt(lm.tokenizer, messages)
    return build_decoder("ar", lm).generate(ids, GenerationConfig(n, lm.eos_token_ids)).tokens


def wait_for(condition: Callable[[], bool], what: str, limit_s: float = 120.0) -> None:
    """Poll until ``condition`` holds; fail (not hang) if it never does."""
    deadline = time.monotonic() + limit_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what}")
        time.sleep(0.02)


def stream_chat(client: openai.OpenAI, **kw: Any) -> tuple[list[str], list[Any]]:
    """Text pieces and all chunks of a streamed chat reply."""
    chunks = list(client.chat.completions.create(stream=True, **kw))
    pieces = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    return pieces, chunks


# --------------------------------------------------------------------------- happy paths


GREETING = [{"role": "user", "content": "Say good morning in Japanese and Chinese, with a sun emoji."}]


def test_chat_streamed_equals_non_streamed_with_emoji_and_cjk(served: Served) -> None:
    client = served.client()
    kw: dict[str, Any] = dict(model=served.model, messages=GREETING, max_tokens=16, temperature=0)
    full = client.chat.completions.create(**kw)
    text = full.choices[0].message.content
    assert any(ord(ch) > 0x2E80 for ch in text), (
        "the reply should hold CJK or emoji for this test to mean much"
    )
    pieces, chunks = stream_chat(client, stream_options={"include_usage": True}, **kw)
    assert "".join(pieces) == text
    assert all(REPLACEMENT not in p for p in pieces)
    assert chunks[0].choices[0].delta.role == "assistant"
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finals) == 1 and finals[0].choices[0].finish_reason == full.choices[0].finish_reason
    assert chunks[-1].choices == [] and chunks[-1].usage == full.usage  # include_usage: the last chunk
    assert full.usage.completion_tokens == 16 and full.choices[0].finish_reason == "length"
    ext = full.model_extra["fastforward"]
    assert ext["method"] == "ar" and ext["target_forwards"] == 16 and ext["tokens_per_forward"] == 1.0
    assert ext["decode_time_s"] > 0


@pytest.mark.parametrize("method", ["lookahead", "jacobi"])
def test_sampled_request_with_a_parallel_method_is_seeded(served: Served, method: str) -> None:
    """Every lossless method samples (rejection sampling over its guesses); a seed reproduces the reply."""
    client = served.client()
    extra = {"fastforward": {"method": method, "return_token_ids": True}}
    kw: dict[str, Any] = dict(
        model=served.model, messages=OK["messages"], max_tokens=12, temperature=0.8, seed=3, extra_body=extra
    )
    a, b = client.chat.completions.create(**kw), client.chat.completions.create(**kw)
    assert a.model_extra["fastforward"]["method"] == method
    assert a.model_extra["fastforward"]["token_ids"] == b.model_extra["fastforward"]["token_ids"]


def test_completions_streamed_and_not(served: Served) -> None:
    client = served.client()
    kw: dict[str, Any] = dict(
        model=served.model, prompt="The capital of France is", max_tokens=6, temperature=0
    )
    full = client.completions.create(**kw)
    streamed = list(client.completions.create(stream=True, **kw))
    assert "".join(c.choices[0].text for c in streamed) == full.choices[0].text
    assert "Paris" in full.choices[0].text
    assert full.object == "text_completion" and full.usage.completion_tokens <= 6
    assert streamed[-1].choices[0].finish_reason == full.choices[0].finish_reason


@pytest.mark.parametrize("method", ["pld", "lookahead"])
def test_lossless_method_gives_offline_greedy_ar_tokens(
    served: Served, smollm2: LoadedModel, method: str
) -> None:
    messages = [
        {
            "role": "user",
            "content": "Repeat exactly: the cat sat on the mat. the cat sat on the mat. the cat sat",
        }
    ]
    reference = offline_ar(smollm2, messages, 24)
    client = served.client()
    extra = {"fastforward": {"method": method, "return_token_ids": True}}
    full = client.chat.completions.create(
        model=served.model, messages=messages, max_tokens=24, extra_body=extra
    )
    assert full.model_extra["fastforward"]["method"] == method
    assert full.model_extra["fastforward"]["token_ids"] == reference
    _, chunks = stream_chat(client, model=served.model, messages=messages, max_tokens=24, extra_body=extra)
    ext = next(c.model_extra["fastforward"] for c in chunks if c.choices and c.choices[0].finish_reason)
    assert ext["token_ids"] == reference
    expected = TextStream(smollm2.tokenizer)
    assert full.choices[0].message.content == expected.push(reference) + expected.finish()


def test_models_health_and_metrics(served: Served) -> None:
    models = served.client().models.list()
    assert [m.id for m in models.data] == [served.model]
    assert httpx.get(served.url + "/health").json() == {"status": "ok"}
    text = httpx.get(served.url + "/metrics").text
    for name in (
        "fastforward:requests_total",
        "fastforward:num_requests_waiting",
        "fastforward:prompt_tokens_total",
        "fastforward:generation_tokens_total",
        "fastforward:time_to_first_token_seconds_bucket",
        "fastforward:e2e_request_latency_seconds_bucket",
        'fastforward:spec_decode_num_target_forwards_total{method="ar"}',
        'fastforward:spec_decode_num_accepted_tokens_total{method="ar"}',
    ):
        assert name in text


def test_pld_metrics_count_draft_and_accepted_tokens(served: Served) -> None:
    messages = [
        {"role": "user", "content": "Copy this line twice: alpha beta gamma delta alpha beta gamma delta"}
    ]
    extra = {"fastforward": {"method": "pld"}}
    reply = served.client().chat.completions.create(
        model=served.model, messages=messages, max_tokens=20, extra_body=extra
    )
    ext = reply.model_extra["fastforward"]
    samples = {
        line.split(" ")[0]: float(line.split(" ")[1])
        for line in httpx.get(served.url + "/metrics").text.splitlines()
        if line.startswith("fastforward:spec_decode") and 'method="pld"' in line and "per_pos" not in line
    }
    forwards = samples['fastforward:spec_decode_num_target_forwards_total{method="pld"}']
    accepted = samples['fastforward:spec_decode_num_accepted_tokens_total{method="pld"}']
    drafted = samples['fastforward:spec_decode_num_draft_tokens_total{method="pld"}']
    tokens = samples['fastforward:spec_decode_generation_tokens_total{method="pld"}']
    assert tokens == forwards + accepted  # each forward: the target's token plus the accepted drafts
    assert drafted >= accepted
    if ext["target_forwards"] == forwards:  # only this request used pld so far
        assert ext["tokens_per_forward"] == pytest.approx(tokens / forwards, abs=1e-3)


# --------------------------------------------------------------------------- stop strings


def test_stop_string_across_token_boundary_is_cut_and_never_sent(
    served: Served, smollm2: LoadedModel
) -> None:
    client = served.client()
    messages = [{"role": "user", "content": "Write one sentence about the sea."}]
    base = client.chat.completions.create(
        model=served.model,
        messages=messages,
        max_tokens=16,
        extra_body={"fastforward": {"return_token_ids": True}},
    )
    text, ids = base.choices[0].message.content, base.model_extra["fastforward"]["token_ids"]
    tok = smollm2.tokenizer
    # a stop string from two characters before a token boundary to two after it, in the middle of the text
    ends = [len(tok.decode(ids[:k], skip_special_tokens=True)) for k in range(1, len(ids))]
    cut = next(e for e in ends if e >= len(text) // 2 and e + 2 <= len(text) and e >= 3)
    stop = text[cut - 2 : cut + 2]
    expected = text[: text.index(stop)]
    kw: dict[str, Any] = dict(model=served.model, messages=messages, max_tokens=16, stop=[stop, "@@never@@"])
    full = client.chat.completions.create(**kw)
    assert full.choices[0].message.content == expected
    assert full.choices[0].finish_reason == "stop"
    pieces, chunks = stream_chat(client, **kw)
    assert "".join(pieces) == expected
    assert all(stop not in p for p in pieces)
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == [
        "stop"
    ]


# --------------------------------------------------------------------------- bad input


OK = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
ALL_BAD: list[tuple[str, Any, int, str | None]] = [
    ("chat", b"{not json", 400, None),
    ("chat", b"[1, 2]", 400, None),
    ("chat", {"max_tokens": 2}, 400, "messages"),
    ("chat", {"messages": "hi"}, 400, "messages"),
    ("chat", {"messages": []}, 400, "messages"),
    ("chat", {"messages": [{"role": "user", "content": 5}]}, 400, "messages[0].content"),
    ("chat", {"messages": [{"role": "robot", "content": "x"}]}, 400, "messages[0].role"),
    ("chat", {**OK, "model": "gpt-4o"}, 400, "model"),
    ("chat", {**OK, "model": 7}, 400, "model"),
    ("chat", {**OK, "max_tokens": 0}, 400, "max_tokens"),
    ("chat", {**OK, "max_tokens": "8"}, 400, "max_tokens"),
    ("chat", {**OK, "max_completion_tokens": -3}, 400, "max_tokens"),
    ("chat", {**OK, "temperature": -0.5}, 400, "temperature"),
    ("chat", {**OK, "temperature": "hot"}, 400, "temperature"),
    ("chat", {**OK, "top_p": 0}, 400, "top_p"),
    ("chat", {**OK, "top_p": 1.5}, 400, "top_p"),
    ("chat", {**OK, "n": 2}, 400, "n"),
    ("chat", {**OK, "stop": ["a", "b", "c", "d", "e"]}, 400, "stop"),
    ("chat", {**OK, "stop": 3}, 400, "stop"),
    ("chat", {**OK, "stream": "yes"}, 400, "stream"),
    ("chat", {**OK, "logprobs": True}, 400, "logprobs"),
    ("chat", {**OK, "max_tokens": 9000}, 400, "max_tokens"),  # prompt + max_tokens > context (8192)
    ("completions", {"prompt": "hello " * 9000, "max_tokens": 2}, 400, "prompt"),  # prompt > context
    ("completions", {"max_tokens": 2}, 400, "prompt"),
    ("completions", {"prompt": 12, "max_tokens": 2}, 400, "prompt"),
    ("chat", {**OK, "fastforward": {"method": "warp"}}, 400, "fastforward"),
    ("chat", {**OK, "fastforward": {"method": "lookahead", "opt": {"gamma": 3}}}, 400, "fastforward"),
    ("chat", {**OK, "fastforward": {"speed": "max"}}, 400, "fastforward"),
    ("chat", {**OK, "fastforward": "pld"}, 400, "fastforward"),
    # found by the decoder itself, before the first token: still a 400, not a broken stream
    ("chat", {**OK, "fastforward": {"method": "lookahead", "opt": {"window": 0}}}, 400, None),
    (
        "chat",
        {**OK, "stream": True, "fastforward": {"method": "jacobi", "opt": {"block_size": 0}}},
        400,
        None,
    ),
    ("chat", {**OK, "fastforward": {"method": "sd"}}, 400, None),  # needs a draft model; none is loaded
]


def assert_openai_error(resp: httpx.Response, status: int, param: str | None = None) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith("application/json")
    body = resp.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    assert "Traceback" not in body["error"]["message"]
    assert body["error"]["param"] == param
    return body["error"]


@pytest.mark.parametrize(
    ("endpoint", "body", "status", "param"), ALL_BAD, ids=[str(i) for i in range(len(ALL_BAD))]
)
def test_bad_input_gets_openai_error(
    served: Served, endpoint: str, body: Any, status: int, param: str | None
) -> None:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    resp = httpx.post(
        f"{served.url}/v1/{'chat/completions' if endpoint == 'chat' else 'completions'}",
        content=raw,
        headers={"content-type": "application/json"},
        timeout=120,
    )
    assert_openai_error(resp, status, param)


def test_unknown_route_is_an_openai_error_too(served: Served) -> None:
    assert_openai_error(httpx.get(served.url + "/v1/embeddings"), 404)


def test_api_key_guards_every_endpoint_but_health(smollm2: LoadedModel) -> None:
    engine = Engine(smollm2, method="ar", max_queue=2)
    with BackgroundServer(create_app(engine, smollm2.tokenizer, smollm2.name, api_key="sekrit")) as srv:
        assert httpx.get(srv.url + "/health").status_code == 200
        for path in ("/v1/models", "/metrics"):
            assert_openai_error(httpx.get(srv.url + path), 401)
            assert_openai_error(httpx.get(srv.url + path, headers={"Authorization": "Bearer nope"}), 401)
            assert httpx.get(srv.url + path, headers={"Authorization": "Bearer sekrit"}).status_code == 200
        assert_openai_error(httpx.post(srv.url + "/v1/chat/completions", json=OK), 401)
        served = Served(srv.url, engine, smollm2.name)
        with pytest.raises(openai.AuthenticationError):
            served.client("wrong").chat.completions.create(
                model=smollm2.name, messages=OK["messages"], max_tokens=2
            )
        reply = served.client("sekrit").chat.completions.create(
            model=smollm2.name, messages=OK["messages"], max_tokens=2
        )
        assert reply.usage.completion_tokens >= 1


# --------------------------------------------------------------------------- load: cancel and queue


def long_stream_body(**extra: Any) -> dict[str, Any]:
    return {**OK, "max_tokens": LONG, "stream": True, "fastforward": {"ignore_eos": True}, **extra}


@dataclass
class OpenStream:
    """A streamed reply read up to its first token and held open; ``close()`` is the client going away."""

    resp: httpx.Response
    lines: Iterator[str]  # kept referenced: a dropped line iterator would close the connection on its own

    def close(self) -> None:
        self.resp.close()


def open_stream_until_first_token(client: httpx.Client, url: str) -> OpenStream:
    """Start a streamed reply and read it up to its first content chunk (so the worker is on it)."""
    resp = client.send(
        client.build_request("POST", url + "/v1/chat/completions", json=long_stream_body()), stream=True
    )
    assert resp.status_code == 200
    lines = resp.iter_lines()
    for line in lines:
        if line.startswith("data: ") and '"content"' in line and '"content": ""' not in line:
            break
    return OpenStream(resp, lines)


def test_client_disconnect_cancels_generation(served: Served) -> None:
    engine, before = served.engine, served.engine.completed
    with httpx.Client(timeout=120) as client:
        stream = open_stream_until_first_token(client, served.url)
        assert engine.busy  # still decoding: nothing but the disconnect below can end it soon
        stream.close()  # the client goes away mid-reply
    wait_for(lambda: engine.completed > before, "the cancelled job to leave the worker")
    job = engine.last_job
    assert job is not None and job.outcome == "cancelled"
    assert 1 <= job.tokens < LONG
    assert job.steps_after_cancel <= 1  # stopped within one decoding step of the cancel
    # the same for a non-streamed request whose client gives up (read timeout closes the connection)
    before = engine.completed
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(
            served.url + "/v1/chat/completions", json={**long_stream_body(), "stream": False}, timeout=1.0
        )
    wait_for(lambda: engine.completed > before, "the abandoned non-streamed job to leave the worker")
    assert engine.last_job is not None and engine.last_job.outcome == "cancelled"
    assert engine.last_job.tokens < LONG
    metrics = httpx.get(served.url + "/metrics").text
    assert 'fastforward:request_success_total{finished_reason="cancelled",method="ar"}' in metrics
    # and the worker is free for the next request
    assert served.client().chat.completions.create(model=served.model, messages=OK["messages"], max_tokens=2)


def test_full_queue_answers_429_with_retry_after(smollm2: LoadedModel) -> None:
    engine = Engine(smollm2, method="ar", max_queue=1)
    with (
        BackgroundServer(create_app(engine, smollm2.tokenizer, smollm2.name)) as srv,
        httpx.Client(timeout=300) as c,
    ):
        running = open_stream_until_first_token(c, srv.url)  # the worker is busy with this one
        queued: dict[str, httpx.Response] = {}
        waiter = threading.Thread(
            target=lambda: queued.update(r=httpx.post(srv.url + "/v1/chat/completions", json=OK, timeout=300))
        )
        waiter.start()
        wait_for(lambda: engine.queued == 1, "the second request to be queued")
        refused = httpx.post(srv.url + "/v1/chat/completions", json=OK)
        err = assert_openai_error(refused, 429)
        assert err["code"] == "queue_full"
        assert int(refused.headers["Retry-After"]) >= 1
        with pytest.raises(openai.RateLimitError):
            Served(srv.url, engine, smollm2.name).client().chat.completions.create(
                model=smollm2.name, messages=OK["messages"], max_tokens=2
            )
        running.close()  # cancel the long one; the queued one runs and succeeds
        waiter.join(300)
        assert queued["r"].status_code == 200
        assert (
            'fastforward:requests_total{endpoint="/v1/chat/completions",status="429"} 2.0'
            in httpx.get(srv.url + "/metrics").text
        )

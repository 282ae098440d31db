"""``fastforward serve`` end to end: the real SmolLM2 (fp32) behind uvicorn on 127.0.0.1 and an ephemeral
port, driven by the official ``openai`` client and raw HTTP.

Covers: chat (streamed and not) and completions; a lossless method through the server gives the tokens of
offline greedy AR; emoji/CJK streamed == non-streamed; stop strings across chunk boundaries; every bad input
with its status and OpenAI's JSON error shape; API keys; a client that disconnects cancels its generation;
a full queue answers 429 with Retry-After. Replies are kept short (a few tokens) so the file stays quick;
no assertion depends on timing (waits are bounded polls for an event).

Continuous batching (``max_batch_size`` > 1) runs on tiny random-init models: concurrent requests share
batched forwards and each gets its batch-1 tokens; a disconnected row leaves alone; a job of another method
waits for the running batch and keeps its place in line; the token budget. Requests are lined up behind a
job whose token callback holds the worker (:class:`Gate`), so which rows share a forward is deterministic."""

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
import torch

from fastforward.core.decoder import GenerationConfig, SamplingConfig
from fastforward.core.detok import REPLACEMENT, TextStream
from fastforward.data import render_prompt
from fastforward.decoders.registry import build_decoder
from fastforward.errors import FastForwardError
from fastforward.models.loading import LoadedModel
from fastforward.serve.app import BackgroundServer, create_app
from fastforward.serve.engine import Done, Engine, Failed, Job, Tokens

from .conftest import make_tiny

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
    assert (ext["ar_steps"], ext["parallel_steps"]) == (15, 0)  # what ran: every step after the prefill
    assert ext["dtype"] == "float32" and ext["path"] in ("default", "prepacked")


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


SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 16},
        "tags": {"type": "array", "items": {"enum": ["big", "old", "cold"]}, "maxItems": 2},
    },
    "required": ["city", "tags"],
    "additionalProperties": False,
}


def test_response_format_json_schema_with_every_method(smollm2: LoadedModel) -> None:
    """The official client's ``response_format`` (json_schema, json_object) and our regex: every method the
    server runs (batched where it has a batched path) answers with constrained greedy AR's tokens, and a
    complete answer parses with the required fields and finish_reason "stop"."""
    from fastforward.decoders.ar import ARDecoder

    methods = ["ar", "pld", "lookahead", "jacobi", "recycle", "suffix", "layerskip", "qsd", "sd"]
    engine = Engine(smollm2, smollm2, method="ar", methods=methods, max_queue=8, max_batch_size=2)
    messages = [{"role": "user", "content": "Name a city and describe it with tags, as JSON."}]
    ids = render_prompt(smollm2.tokenizer, messages)
    fmt = {"type": "json_schema", "json_schema": {"name": "city", "schema": SCHEMA, "strict": True}}
    cfg = GenerationConfig(40, smollm2.eos_token_ids, constraint=smollm2.constraint("json_schema", SCHEMA))
    reference = ARDecoder(smollm2.model).generate(ids, cfg)
    with BackgroundServer(create_app(engine, smollm2.tokenizer, smollm2.name)) as srv:
        client = Served(srv.url, engine, smollm2.name).client()
        for method in methods:
            full = client.chat.completions.create(
                model=smollm2.name, messages=messages, max_tokens=40, response_format=fmt,
                extra_body={"fastforward": {"method": method, "return_token_ids": True}},
            )  # fmt: skip
            ext = full.model_extra["fastforward"]
            assert ext["token_ids"] == reference.tokens, method
            assert ext["constraint"]["kind"] == "json_schema" and ext["constraint"]["masks"] >= 1
            if reference.stats.extras["constraint_complete"]:
                assert full.choices[0].finish_reason == "stop"
                assert set(json.loads(full.choices[0].message.content)) == {"city", "tags"}
        # json_object, streamed: the text is one JSON object
        _, chunks = stream_chat(
            client, model=smollm2.name, messages=messages, max_tokens=40,
            response_format={"type": "json_object"},
        )  # fmt: skip
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text.lstrip().startswith("{")
        # our regex extension through raw HTTP
        body = {"messages": messages, "max_tokens": 12, "fastforward": {"regex": "(Paris|Rome|Oslo)!"}}
        resp = httpx.post(f"{srv.url}/v1/chat/completions", json=body, timeout=300).json()
        assert resp["choices"][0]["message"]["content"] in ("Paris!", "Rome!", "Oslo!")
        assert resp["choices"][0]["finish_reason"] == "stop"


def test_logprobs_of_a_parallel_method_are_ar_logprobs_streamed_or_not(
    served: Served, smollm2: LoadedModel
) -> None:
    """OpenAI's chat ``logprobs`` / ``top_logprobs`` and the legacy completions ``logprobs``: one entry per
    generated token, the values offline AR reports (pld verifies several tokens per forward here), the same
    entries whether streamed (per chunk) or not."""
    messages = [{"role": "user", "content": "Repeat exactly: one two three. one two three. one two"}]
    ids = render_prompt(smollm2.tokenizer, messages)
    ref = build_decoder("ar", smollm2).generate(ids, GenerationConfig(16, smollm2.eos_token_ids, logprobs=2))
    client = served.client()
    kw = dict(model=served.model, messages=messages, max_tokens=16, logprobs=True, top_logprobs=2,
              extra_body={"fastforward": {"method": "pld", "return_token_ids": True}})  # fmt: skip
    full = client.chat.completions.create(**kw)
    assert full.model_extra["fastforward"]["token_ids"] == ref.tokens
    content = full.choices[0].logprobs.content
    assert len(content) == len(ref.tokens)
    for c, r in zip(content, ref.logprobs, strict=True):
        assert c.token == smollm2.tokenizer.decode([r.token])
        assert abs(c.logprob - r.logprob) < 2e-3 and len(c.top_logprobs) == 2
    _, chunks = stream_chat(client, **kw)
    streamed = [
        x for ch in chunks if ch.choices and ch.choices[0].logprobs for x in ch.choices[0].logprobs.content
    ]
    assert [(x.token, round(x.logprob, 3)) for x in streamed] == [
        (x.token, round(x.logprob, 3)) for x in content
    ]
    comp = client.completions.create(model=served.model, prompt="one two three, one two three, one", max_tokens=6,
                                     logprobs=2)  # fmt: skip
    lp = comp.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == comp.usage.completion_tokens
    assert all(len(t) == 2 for t in lp.top_logprobs) and "".join(lp.tokens) == comp.choices[0].text


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"enum": ["Paris", "Oslo", "Rome"]}, "unit": {"enum": ["C", "F"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {
    "zone": {"enum": ["UTC", "CET"]}}, "required": ["zone"], "additionalProperties": False}}}  # fmt: skip


def test_tool_calls_with_required_and_named_tool_choice(served: Served) -> None:
    """``tools`` + ``tool_choice`` required / named: the answer is one call with arguments that follow the
    function's schema, as OpenAI's ``tool_calls`` (finish_reason "tool_calls"), the same call from a parallel
    method and when streamed."""
    client = served.client()
    messages = [{"role": "user", "content": "What is the weather in Paris, in Celsius?"}]
    kw = dict(model=served.model, messages=messages, max_tokens=48, tools=[WEATHER, TIME])
    calls = {}
    for method in ("ar", "pld"):
        full = client.chat.completions.create(
            **kw, tool_choice="required", extra_body={"fastforward": {"method": method}}
        )
        choice = full.choices[0]
        assert choice.finish_reason == "tool_calls" and choice.message.content is None
        call = choice.message.tool_calls[0]
        calls[method] = (call.function.name, json.loads(call.function.arguments))
        assert full.model_extra["fastforward"]["constraint"]["kind"] == "tool_call"
    assert calls["ar"] == calls["pld"] and calls["ar"][0] in ("get_weather", "get_time")
    named = client.chat.completions.create(
        **kw, tool_choice={"type": "function", "function": {"name": "get_time"}}
    )
    call = named.choices[0].message.tool_calls[0]
    assert call.function.name == "get_time" and json.loads(call.function.arguments)["zone"] in ("UTC", "CET")
    _, chunks = stream_chat(client, **kw, tool_choice="required")
    deltas = [c.choices[0].delta for c in chunks if c.choices and c.choices[0].delta.tool_calls]
    assert len(deltas) == 1
    streamed = deltas[0].tool_calls[0].function
    assert (streamed.name, json.loads(streamed.arguments)) == calls["ar"]
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == [
        "tool_calls"
    ]
    # the tool loop goes on: the call and its result come back as messages, the answer is text
    follow = client.chat.completions.create(
        model=served.model, max_tokens=8,
        messages=[*messages, full.choices[0].message.model_dump(exclude_none=True),
                  {"role": "tool", "tool_call_id": full.choices[0].message.tool_calls[0].id, "content": "18 C"}],
    )  # fmt: skip
    assert follow.choices[0].message.content and follow.choices[0].finish_reason in ("stop", "length")


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
    drafts = samples['fastforward:spec_decode_num_drafts_total{method="pld"}']
    ar_steps = samples['fastforward:spec_decode_num_ar_steps_total{method="pld"}']
    assert tokens == forwards + accepted  # each forward: the target's token plus the accepted drafts
    assert drafted >= accepted and drafted >= drafts
    assert ext["ar_steps"] + ext["parallel_steps"] == ext["target_forwards"] - 1
    if ext["target_forwards"] == forwards:  # only this request used pld so far
        assert ext["tokens_per_forward"] == pytest.approx(tokens / forwards, abs=1e-3)
        assert (drafts, ar_steps) == (ext["parallel_steps"], ext["ar_steps"])  # AR fallback counted apart


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
    ("chat", {**OK, "logprobs": True, "top_logprobs": 30}, 400, "top_logprobs"),
    ("chat", {**OK, "top_logprobs": 2}, 400, "top_logprobs"),
    ("completions", {"prompt": "hi", "max_tokens": 2, "logprobs": 9}, 400, "logprobs"),
    ("chat", {**OK, "logprobs": True, "fastforward": {"method": "hf_generate"}}, 400, "logprobs"),
    # tools: a call is constrained only when it must happen (required / named); 'auto' is refused
    ("chat", {**OK, "tools": [{"type": "function", "function": {"name": "f"}}]}, 400, "tool_choice"),
    (
        "chat",
        {**OK, "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "auto"},
        400,
        "tool_choice",
    ),  # fmt: skip
    (
        "chat",
        {
            **OK,
            "tools": [{"type": "function", "function": {"name": "f"}}],
            "tool_choice": {"type": "function", "function": {"name": "g"}},
        },
        400,
        "tool_choice",
    ),  # fmt: skip
    (
        "chat",
        {**OK, "tools": [{"type": "function", "function": {"name": "no spaces"}}], "tool_choice": "required"},
        400,
        "tools",
    ),  # fmt: skip
    ("chat", {**OK, "tools": "f", "tool_choice": "required"}, 400, "tools"),
    ("chat", {**OK, "tool_choice": "required"}, 400, "tool_choice"),
    (
        "completions",
        {"prompt": "hi", "max_tokens": 2, "tools": [{"type": "function", "function": {"name": "f"}}]},
        400,
        "tools",
    ),  # fmt: skip
    (
        "chat",
        {**OK, "messages": [{"role": "assistant", "content": None, "tool_calls": "f"}]},
        400,
        "messages[0].tool_calls",
    ),  # fmt: skip
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
    # structured output: a schema or regex that does not compile, a format that does not exist
    (
        "chat",
        {**OK, "response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "x"}}}},
        400,
        "response_format",
    ),  # fmt: skip
    (
        "chat",
        {**OK, "response_format": {"type": "json_schema", "json_schema": {"name": "a"}}},
        400,
        "response_format",
    ),  # fmt: skip
    ("chat", {**OK, "response_format": {"type": "yaml"}}, 400, "response_format"),
    ("chat", {**OK, "response_format": "json"}, 400, "response_format"),
    ("chat", {**OK, "fastforward": {"regex": "("}}, 400, "fastforward.regex"),
    ("chat", {**OK, "fastforward": {"choice": []}}, 400, "fastforward.choice"),
    ("chat", {**OK, "fastforward": {"regex": "a", "choice": ["a"]}}, 400, "fastforward"),
    (
        "chat",
        {**OK, "response_format": {"type": "json_object"}, "fastforward": {"regex": "a"}},
        400,
        "response_format",
    ),  # fmt: skip
    (
        "chat",
        {**OK, "response_format": {"type": "json_object"}, "fastforward": {"method": "hf_generate"}},
        400,
        "response_format",
    ),  # fmt: skip
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


def test_each_api_key_learns_only_from_its_own_earlier_outputs(smollm2: LoadedModel) -> None:
    """suffix keeps earlier outputs per API key: the same question asked again with key A copies A's first
    answer (fewer forwards), while key B asking it starts as A's first request did (its own empty history);
    with --share-history B copies A's answer too. Tokens are greedy AR's every time."""
    body = {
        "messages": OK["messages"],
        "max_tokens": 24,
        "fastforward": {"method": "suffix", "return_token_ids": True},
    }

    def forwards(srv, key: str) -> tuple[int, list[int]]:
        r = httpx.post(srv.url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"},
                       timeout=300)  # fmt: skip
        assert r.status_code == 200, r.text
        ext = r.json()["fastforward"]
        return ext["target_forwards"], ext["token_ids"]

    reference = offline_ar(smollm2, OK["messages"], 24)
    for share in (False, True):
        engine = Engine(smollm2, method="ar", methods=["ar", "suffix"], max_queue=4)
        app = create_app(engine, smollm2.tokenizer, smollm2.name, api_key="key-a, key-b", share_history=share)
        with BackgroundServer(app) as srv:
            a1, ids_a1 = forwards(srv, "key-a")
            a2, ids_a2 = forwards(srv, "key-a")
            b1, ids_b1 = forwards(srv, "key-b")
        assert ids_a1 == ids_a2 == ids_b1 == reference
        assert a2 < a1
        assert (b1 < a1) if share else (b1 == a1), (share, a1, a2, b1)


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


# --------------------------------------------------------------------------- batching (tiny models)


class IdTokenizer:
    """Stands in for a tokenizer with the tiny random models: every id is its own word (``" t17"``)."""

    def __init__(self, vocab: int) -> None:
        self.vocab = vocab

    def __len__(self) -> int:
        return self.vocab

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return "".join(f" t{i}" for i in ids)


class Gate:
    """A job submitted straight to the engine whose token callback holds the worker thread at chosen
    deliveries until the test lets it go: requests line up behind it deterministically, without sleeps.
    Its own tokens are checked like any other request's."""

    def __init__(self, engine: Engine, prompt: list[int], n: int, hold_at: tuple[int, ...] = (1,)) -> None:
        self.prompt, self.tokens, self.calls = prompt, [], 0
        self.events: list[Any] = []
        self.holds = {k: (threading.Event(), threading.Event()) for k in hold_at}  # (reached, released)
        method, options = engine.resolve("ar", {})
        self.job = Job(list(prompt), GenerationConfig(n, ()), method, options, self.deliver)
        engine.submit(self.job)

    def deliver(self, event: Any) -> None:
        self.events.append(event)
        if isinstance(event, Tokens):
            self.tokens += event.ids
            self.calls += 1
            if self.calls in self.holds:
                reached, released = self.holds[self.calls]
                reached.set()
                released.wait(120)

    def reached(self, k: int) -> None:
        wait_for(self.holds[k][0].is_set, f"the gate's delivery {k}")

    def release(self, k: int | None = None) -> None:
        for key in [k] if k is not None else list(self.holds):
            self.holds[key][1].set()


class Collect:
    """A job's events as the app would see them, with when its Done arrived (for ordering, not timing)."""

    def __init__(self, engine: Engine, prompt: list[int], n: int, method: str = "ar") -> None:
        self.tokens: list[int] = []
        self.done: Done | None = None
        self.done_at = 0.0
        self.failed: Failed | None = None
        name, options = engine.resolve(method, {})
        eos = engine.target.eos_token_ids
        self.job = Job(list(prompt), GenerationConfig(n, eos), name, options, self.deliver)

    def deliver(self, event: Any) -> None:
        if isinstance(event, Tokens):
            self.tokens += event.ids
        elif isinstance(event, Done):
            self.done, self.done_at = event, time.perf_counter()
        elif isinstance(event, Failed):
            self.failed = event


TINY_PROMPTS = [[5, 6, 7, 8, 5, 6, 7], [11, 12, 13], list(range(20, 41)), [7], [3, 4, 3, 4, 3]]


@pytest.fixture()
def tiny_served() -> Iterator[tuple[Served, LoadedModel]]:
    tiny = make_tiny()
    engine = Engine(tiny, method="ar", methods=["ar", "pld", "lookahead"], max_queue=16, max_batch_size=4)
    with BackgroundServer(create_app(engine, IdTokenizer(512), tiny.name)) as srv:
        yield Served(srv.url, engine, tiny.name), tiny


def tiny_reference(tiny: LoadedModel, prompt: list[int], n: int, sampling: Any = None) -> list[int]:
    cfg = GenerationConfig(n, tiny.eos_token_ids, sampling or SamplingConfig())
    return build_decoder("ar", tiny).generate(prompt, cfg).tokens


def post_ids(url: str, prompt: list[int], n: int, **extra: Any) -> list[int]:
    body = {"prompt": prompt, "max_tokens": n, "fastforward": {"return_token_ids": True}, **extra}
    resp = httpx.post(url + "/v1/completions", json=body, timeout=120)
    assert resp.status_code == 200, resp.text
    return resp.json()["fastforward"]["token_ids"]


def in_threads(calls: list[Callable[[], Any]]) -> tuple[list[threading.Thread], dict[int, Any]]:
    out: dict[int, Any] = {}

    def run(i: int, call: Callable[[], Any]) -> None:
        out[i] = call()

    threads = [threading.Thread(target=run, args=(i, c), daemon=True) for i, c in enumerate(calls)]
    for t in threads:
        t.start()
    return threads, out


def scrape(url: str) -> dict[str, float]:
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in httpx.get(url + "/metrics").text.splitlines()
        if line.startswith("fastforward:")
    }


def test_concurrent_requests_share_batched_forwards_and_get_batch_1_tokens(
    tiny_served: tuple[Served, LoadedModel],
) -> None:
    """Five requests (one sampled, seeded) queued behind a held job: four rows decode together, the fifth
    joins when a slot frees; every reply equals what the batch-1 decoder gives for its prompt."""
    served, tiny = tiny_served
    engine = served.engine
    lengths = [12, 20, 8, 16, 10]
    sampled = SamplingConfig(temperature=0.9, seed=5)
    gate = Gate(engine, [1, 2, 3], 6)
    try:
        gate.reached(1)  # the worker is held inside the gate's first step
        calls: list[Callable[[], Any]] = [
            lambda p=p, n=n: post_ids(served.url, p, n)
            for p, n in zip(TINY_PROMPTS[:4], lengths[:4], strict=True)
        ]
        calls.append(lambda: post_ids(served.url, TINY_PROMPTS[4], lengths[4], temperature=0.9, seed=5))
        threads, got = in_threads(calls)
        wait_for(lambda: engine.queued == 5, "five requests to queue behind the gate")
    finally:
        gate.release()
    for t in threads:
        t.join(120)
    for i, (p, n) in enumerate(zip(TINY_PROMPTS, lengths, strict=True)):
        assert got[i] == tiny_reference(tiny, p, n, sampled if i == 4 else None), i
    wait_for(lambda: gate.job.outcome == "done", "the gate to finish")
    assert gate.tokens == build_decoder("ar", tiny).generate([1, 2, 3], GenerationConfig(6)).tokens
    done = gate.events[-1]
    assert isinstance(done, Done) and done.result.stats.new_tokens == 6 == done.result.stats.target_forwards
    assert engine.batch is not None and engine.batch.stats.max_rows == 4
    wait_for(lambda: scrape(served.url)["fastforward:num_batch_rows"] == 0, "the batch to drain")
    m = scrape(served.url)
    count = m['fastforward:batch_forward_rows_count{method="ar"}']
    assert (
        count == engine.batch.stats.forwards and m['fastforward:batch_forward_rows_sum{method="ar"}'] > count
    )
    assert m['fastforward:batch_forward_rows_bucket{le="4.0",method="ar"}'] == count  # never over 4 rows
    assert m['fastforward:batch_forward_rows_bucket{le="2.0",method="ar"}'] < count  # some forward had 3+


def test_a_disconnected_row_leaves_without_disturbing_its_batch(
    tiny_served: tuple[Served, LoadedModel],
) -> None:
    """A streamed request in a batch of four is dropped by its client mid-reply: its row leaves within one
    step, the other rows' replies are still exactly their batch-1 tokens."""
    served, tiny = tiny_served
    engine = served.engine
    long_n = 400
    # held at its first delivery (nothing else queued yet) and at its third: the first batched step of
    # all four rows, after the streamed request's first token went out
    gate = Gate(engine, [1, 2, 3], 8, hold_at=(1, 3))
    client = httpx.Client(timeout=120)
    opened: dict[str, OpenStream] = {}

    def open_long() -> None:
        body = {"prompt": TINY_PROMPTS[2], "max_tokens": long_n, "stream": True}
        body["fastforward"] = {"ignore_eos": True}
        resp = client.send(
            client.build_request("POST", served.url + "/v1/completions", json=body), stream=True
        )
        assert resp.status_code == 200
        lines = resp.iter_lines()
        for line in lines:
            if line.startswith("data: {") and json.loads(line[6:])["choices"][0]["text"]:
                break
        opened["s"] = OpenStream(resp, lines)

    try:
        gate.reached(1)
        threads, got = in_threads([lambda p=p: post_ids(served.url, p, 16) for p in TINY_PROMPTS[:2]])
        streamer = threading.Thread(target=open_long, daemon=True)
        streamer.start()
        wait_for(lambda: engine.queued == 3, "three requests to queue behind the gate")
        gate.release(1)
        gate.reached(3)  # the worker is held mid-step, with four rows
        streamer.join(120)
        rows = engine.running_jobs()
        assert len(rows) == 4 and "s" in opened
        job = next(j for j in rows if j.config.max_new_tokens == long_n)
        opened["s"].close()  # the client goes away
        wait_for(job.cancel.is_set, "the disconnect to cancel the job")
    finally:
        gate.release()
    for t in threads:
        t.join(120)
    client.close()
    assert [got[0], got[1]] == [tiny_reference(tiny, p, 16) for p in TINY_PROMPTS[:2]]
    wait_for(lambda: job.outcome is not None, "the cancelled job to leave")
    assert job.outcome == "cancelled" and job.steps_after_cancel <= 1 and job.tokens < long_n
    wait_for(lambda: gate.job.outcome is not None, "the gate to finish")
    assert gate.tokens == build_decoder("ar", tiny).generate([1, 2, 3], GenerationConfig(8)).tokens
    assert engine.batch is not None and engine.batch.stats.max_rows == 4


def test_another_method_waits_for_the_batch_then_runs_and_keeps_its_place() -> None:
    """Queued behind a running ar batch: ar, pld, ar, lookahead (each another method's batch). The first ar
    joins the running batch; pld waits until it drains and the ar behind pld does not jump it; lookahead
    runs after. Every reply equals batch-1 greedy AR (all four methods are lossless)."""
    tiny = make_tiny()
    engine = Engine(tiny, method="ar", methods=["ar", "pld", "lookahead"], max_batch_size=4)
    engine.start()
    try:
        gate = Gate(engine, [1, 2, 3], 6)
        jobs = [
            Collect(engine, TINY_PROMPTS[i], 10, m) for i, m in enumerate(["ar", "pld", "ar", "lookahead"])
        ]
        try:
            gate.reached(1)
            for c in jobs:
                engine.submit(c.job)
        finally:
            gate.release()
        wait_for(lambda: all(c.job.outcome for c in jobs), "every job to finish")
    finally:
        engine.shutdown()
    ar1, pld, ar2, look = jobs
    assert all(c.job.outcome == "done" and c.done is not None for c in jobs)
    for i, c in enumerate(jobs):
        assert c.tokens == c.done.result.tokens == tiny_reference(tiny, TINY_PROMPTS[i], 10), i
        assert c.done.result.stats.new_tokens == len(c.tokens) and c.done.result.stats.target_forwards >= 1
    gate_done = next(e for e in gate.events if isinstance(e, Done))
    assert gate_done.result.tokens == gate.tokens
    # order of events, not durations: ar1 joined the gate's batch; pld started after that batch drained
    assert ar1.job.started_at < pld.job.started_at and pld.job.started_at >= ar1.done_at
    assert ar2.job.started_at >= pld.done_at and look.job.started_at >= ar2.done_at
    assert engine.batch is not None and engine.batch.name == "lookahead"  # the last batch to run


def test_token_budget_limits_rows_and_refuses_a_job_over_it() -> None:
    tiny = make_tiny()
    engine = Engine(tiny, method="ar", methods=["ar"], max_batch_size=4, token_budget=40)
    engine.start()
    try:
        gate = Gate(engine, [1, 2, 3], 6)  # reserves 9 of the 40 positions
        fits = [Collect(engine, [7, 8], 10) for _ in range(3)]  # 12 each: two join the gate, one waits
        too_big = Collect(engine, list(range(30)), 20)  # 50 > 40 on its own
        try:
            gate.reached(1)
            for c in (*fits, too_big):
                engine.submit(c.job)
        finally:
            gate.release()
        wait_for(lambda: all(c.job.outcome for c in (*fits, too_big)), "every job to finish")
    finally:
        engine.shutdown()
    ref = tiny_reference(tiny, [7, 8], 10)
    assert all(c.tokens == ref for c in fits)
    assert engine.batch is not None and engine.batch.stats.max_rows == 3
    assert too_big.job.outcome == "failed" and too_big.failed is not None
    assert too_big.failed.status == 400 and "token budget" in too_big.failed.message
    with pytest.raises(FastForwardError, match="max-batch-size"):
        Engine(tiny, method="ar", methods=["ar"], max_batch_size=0)
    with pytest.raises(FastForwardError, match="token-budget"):
        Engine(tiny, method="ar", methods=["ar"], token_budget=-1)


def test_the_worker_builds_the_default_decoder_and_loads_stored_packages_before_start_returns(
    tmp_path, monkeypatch
) -> None:
    """``start(warm=True)`` returns once the worker thread has built the default decoder and loaded the
    compiled packages already on disk: every torch computation of a server runs in that one thread (a second
    OpenMP pool throttles both; Engine.start's docstring). A default decoder that cannot be built fails in
    start(), in the caller, and leaves no worker behind."""
    from fastforward.core.engine import compile_forward
    from fastforward.serve import engine as serve_engine

    tiny = make_tiny()
    compile_forward(tiny.model, capacity=256, mode=None, store=tmp_path)
    build_decoder("ar", tiny).generate(torch.tensor([[5, 6, 7]]), GenerationConfig(3))  # stores k1's package
    again = make_tiny()
    runner = compile_forward(again.model, capacity=256, mode=None, store=tmp_path)
    seen: list[str] = []
    real = serve_engine.warm_stored

    def recorded(model: Any) -> float:
        seen.append(threading.current_thread().name)
        return real(model)

    monkeypatch.setattr(serve_engine, "warm_stored", recorded)
    engine = Engine(again, method="ar", methods=["ar"])
    engine.start(warm=True)
    try:
        assert seen == ["fastforward-worker"] and list(runner.startup) == ["k1-s256"]
    finally:
        engine.shutdown()
    broken = Engine(make_tiny(), method="ar", methods=["ar"])

    def refuse(*_a: Any, **_k: Any) -> Any:
        raise FastForwardError("ar: cannot be built here")

    monkeypatch.setattr(serve_engine, "build_decoder", refuse)
    with pytest.raises(FastForwardError, match="cannot be built here"):
        broken.start()
    assert broken._thread is None  # noqa: SLF001 - no worker left running

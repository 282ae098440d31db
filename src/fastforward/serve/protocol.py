"""The OpenAI wire format: request bodies checked by hand into one :class:`GenerationRequest`, errors in
OpenAI's JSON shape, and the response and stream-chunk bodies.

Why by hand and not with pydantic models: a client's mistake must come back as a 400 in OpenAI's error
shape naming the offending parameter, never as a framework's 422 or a 500 with a traceback; checking each
field explicitly makes every rule (and its message) visible and testable without a server.

Accepted fields follow OpenAI's chat and legacy completions APIs (``model``, ``messages`` / ``prompt``,
``max_tokens``, ``max_completion_tokens``, ``temperature``, ``top_p``, ``seed``, ``stop``, ``n`` = 1,
``stream``, ``stream_options.include_usage``, ``response_format`` text / json_object / json_schema), vLLM's
``top_k`` and our extension object ``fastforward: {method, opt, ignore_eos, return_token_ids, regex, choice}``
(``regex`` / ``choice``: structured output beyond JSON, as vLLM's ``guided_regex`` / ``guided_choice``). Unknown fields are ignored, as OpenAI does;
fields that ask for something this server cannot do (n > 1, ``tool_choice`` auto, tools on completions, ...)
are refused. ``logprobs`` / ``top_logprobs`` and ``tools`` with a required or named ``tool_choice`` (chat) are
served; see docs/serving.md.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

MAX_STOPS = 4
ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant", "tool": "tool"}
EXTENSION = "fastforward"
EXTENSION_KEYS = {"method", "opt", "ignore_eos", "return_token_ids", "regex", "choice"}


class APIError(Exception):
    """An answer in OpenAI's error shape: ``{"error": {"message", "type", "param", "code"}}``."""

    def __init__(
        self,
        status: int,
        message: str,
        type_: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type_, param, code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def bad(param: str | None, message: str, code: str | None = None) -> APIError:
    """A 400 for one request parameter."""
    return APIError(400, message, param=param, code=code)


@dataclass
class GenerationRequest:
    """One checked request, chat or completion; None means "the server's default" (its ``--max-new-tokens``,
    ``--temperature``, ``--top-p``, ``--top-k``, ``--seed``), so a server started greedy stays greedy for
    clients that send no sampling fields (OpenAI's own default temperature is 1)."""

    kind: str  # "chat" | "completion"
    model: str | None
    messages: list[dict[str, str]] | None = None
    prompt: str | list[int] | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stream: bool = False
    include_usage: bool = False
    method: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    ignore_eos: bool = False
    return_token_ids: bool = False
    # structured output: (kind, spec) for fastforward.core.constraint (checked here: a bad schema is a 400)
    constraint: tuple[str, Any] | None = None
    constraint_param: str = "response_format"  # the request field the constraint came from (for a 400)
    logprobs: int | None = None  # None: none asked; n: each token's log-probability and the n likeliest
    tools: list[dict[str, Any]] | None = None  # the functions the model is told about (chat)
    tool_call: bool = False  # the answer is one call of ``tools`` (tool_choice required / named)


# --------------------------------------------------------------------------- field checks


def _get(body: dict[str, Any], key: str) -> Any:
    return body.get(key)  # JSON null counts as absent, as in OpenAI's API


_KINDS: dict[str, tuple[type, ...]] = {"a boolean": (bool,), "an integer": (int,), "a number": (int, float)}


def _typed(body: dict[str, Any], key: str, kind: str) -> Any:
    """An optional field of JSON type ``kind`` (a key of _KINDS), None when absent; a boolean is never a
    number here, although Python's bool is an int."""
    v = _get(body, key)
    if v is None:
        return None
    if (isinstance(v, bool) and kind != "a boolean") or not isinstance(v, _KINDS[kind]):
        raise bad(key, f"'{key}' must be {kind}, got {_jtype(v)}")
    return v


def _bool(body: dict[str, Any], key: str, default: bool = False) -> bool:
    v = _typed(body, key, "a boolean")
    return default if v is None else v


def _int(body: dict[str, Any], key: str) -> int | None:
    return _typed(body, key, "an integer")


def _number(body: dict[str, Any], key: str) -> float | None:
    v = _typed(body, key, "a number")
    return None if v is None else float(v)


def _jtype(v: Any) -> str:
    names = {bool: "boolean", int: "integer", float: "number", str: "string", list: "array", dict: "object"}
    return "null" if v is None else names.get(type(v), type(v).__name__)


def _common(body: Any, kind: str) -> GenerationRequest:
    if not isinstance(body, dict):
        raise bad(None, f"the request body must be a JSON object, got {_jtype(body)}")
    model = _get(body, "model")
    if model is not None and not isinstance(model, str):
        raise bad("model", f"'model' must be a string, got {_jtype(model)}")
    req = GenerationRequest(kind=kind, model=model)

    req.max_tokens = _int(body, "max_completion_tokens")
    if req.max_tokens is None:
        req.max_tokens = _int(body, "max_tokens")
    elif _int(body, "max_tokens") is not None and _int(body, "max_tokens") != req.max_tokens:
        raise bad("max_tokens", "'max_tokens' and 'max_completion_tokens' disagree; give one")
    if req.max_tokens is not None and req.max_tokens < 1:
        raise bad("max_tokens", f"'max_tokens' must be >= 1, got {req.max_tokens}")

    req.temperature = _number(body, "temperature")
    if req.temperature is not None and req.temperature < 0:
        raise bad("temperature", f"'temperature' must be >= 0, got {req.temperature}")
    req.top_p = _number(body, "top_p")
    if req.top_p is not None and not 0.0 < req.top_p <= 1.0:
        raise bad("top_p", f"'top_p' must be in (0, 1], got {req.top_p}")
    req.top_k = _int(body, "top_k")
    if req.top_k is not None and req.top_k < 0:
        raise bad("top_k", f"'top_k' must be >= 0, got {req.top_k}")
    req.seed = _int(body, "seed")

    n = _int(body, "n")
    if n is not None and n != 1:
        raise bad("n", f"'n' must be 1 (one choice per request), got {n}")
    req.stop = _stops(_get(body, "stop"))
    req.stream = _bool(body, "stream")
    opts = _get(body, "stream_options")
    if opts is not None:
        if not isinstance(opts, dict):
            raise bad("stream_options", f"'stream_options' must be an object, got {_jtype(opts)}")
        req.include_usage = _bool(opts, "include_usage")
    _refuse_unsupported(body, kind)
    _extension(body, req)
    _response_format(body, req)
    _logprobs(body, req)
    return req


def _stops(v: Any) -> tuple[str, ...]:
    if v is None:
        return ()
    stops = [v] if isinstance(v, str) else v
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise bad("stop", "'stop' must be a string or an array of strings")
    if len(stops) > MAX_STOPS:
        raise bad("stop", f"'stop' takes at most {MAX_STOPS} strings, got {len(stops)}")
    if any(not s for s in stops):
        raise bad("stop", "'stop' strings must not be empty")
    return tuple(stops)


def _refuse_unsupported(body: dict[str, Any], kind: str = "chat") -> None:
    """Fields whose non-default value asks for something this server does not do: refused, not ignored."""
    wanted = {
        "tools": kind != "chat" and bool(_get(body, "tools")),
        "tool_choice": kind != "chat" and _get(body, "tool_choice") is not None,
        "functions": bool(_get(body, "functions")),
        "echo": bool(_get(body, "echo")),
        "suffix": bool(_get(body, "suffix")),
        "best_of": _get(body, "best_of") not in (None, 1),
    }
    for key, asked in wanted.items():
        if asked:
            raise bad(key, f"'{key}' is not supported by this server")


def _extension(body: dict[str, Any], req: GenerationRequest) -> None:
    ext = _get(body, EXTENSION)
    if ext is None:
        return
    if not isinstance(ext, dict):
        raise bad(EXTENSION, f"'{EXTENSION}' must be an object, got {_jtype(ext)}")
    unknown = sorted(set(ext) - EXTENSION_KEYS)
    if unknown:
        raise bad(
            EXTENSION,
            f"unknown '{EXTENSION}' fields: {', '.join(unknown)}; known: {', '.join(sorted(EXTENSION_KEYS))}",
        )
    method = ext.get("method")
    if method is not None and not isinstance(method, str):
        raise bad(f"{EXTENSION}.method", f"'{EXTENSION}.method' must be a string, got {_jtype(method)}")
    req.method = method
    opt = ext.get("opt")
    if opt is not None:
        if not isinstance(opt, dict) or not all(isinstance(v, (bool, int, float, str)) for v in opt.values()):
            raise bad(
                f"{EXTENSION}.opt", f"'{EXTENSION}.opt' must be an object of numbers, booleans or strings"
            )
        req.options = dict(opt)
    req.ignore_eos = _bool(ext, "ignore_eos")
    req.return_token_ids = _bool(ext, "return_token_ids")
    asked = [k for k in ("regex", "choice") if ext.get(k) is not None]
    if len(asked) > 1:
        raise bad(EXTENSION, f"give one of '{EXTENSION}.regex' and '{EXTENSION}.choice', not both")
    if asked:
        req.constraint_param = f"{EXTENSION}.{asked[0]}"
        req.constraint = _checked(req.constraint_param, asked[0], ext[asked[0]])


def _logprobs(body: dict[str, Any], req: GenerationRequest) -> None:
    """Chat: ``logprobs`` (boolean) and ``top_logprobs`` (0-20, needs logprobs); completions: ``logprobs``
    (0-5, the number of alternatives, as the legacy API)."""
    if req.kind == "chat":
        want = _bool(body, "logprobs")
        top = _int(body, "top_logprobs")
        if top is not None and not 0 <= top <= 20:
            raise bad("top_logprobs", f"'top_logprobs' must be in [0, 20], got {top}")
        if top and not want:
            raise bad("top_logprobs", "'top_logprobs' needs 'logprobs': true")
        req.logprobs = (top or 0) if want else None
        return
    n = _int(body, "logprobs")
    if n is not None and not 0 <= n <= 5:
        raise bad("logprobs", f"'logprobs' must be in [0, 5], got {n}")
    req.logprobs = n


def tool_calls(text: str) -> list[dict[str, Any]] | None:
    """OpenAI's ``tool_calls`` for a complete constrained call ``{"name", "arguments"}``; None if it is not
    one (cut by the length cap)."""
    try:
        call = json.loads(text)
    except json.JSONDecodeError:
        return None
    if not isinstance(call, dict) or "name" not in call or "arguments" not in call:
        return None
    fn = {"name": call["name"], "arguments": json.dumps(call["arguments"])}
    return [{"id": "call_" + uuid.uuid4().hex[:24], "type": "function", "function": fn}]


def logprobs_body(kind: str, entries: list[Any], decode: Any, offset: int = 0) -> dict[str, Any] | None:
    """OpenAI's ``logprobs`` object for core.logprobs.TokenLogprob ``entries`` (None entries are skipped):
    chat ``{"content": [{token, logprob, bytes, top_logprobs}]}``, completions the legacy parallel lists."""
    entries = [e for e in entries if e is not None]
    if kind == "chat":

        def one(tok: int, lp: float) -> dict[str, Any]:
            text = decode(tok)
            return {"token": text, "logprob": lp, "bytes": list(text.encode("utf-8"))}

        return {
            "content": [
                {**one(e.token, e.logprob), "top_logprobs": [one(t, lp) for t, lp in e.top]} for e in entries
            ]
        }
    texts = [decode(e.token) for e in entries]
    offsets, at = [], offset
    for t in texts:
        offsets.append(at)
        at += len(t)
    return {
        "tokens": texts,
        "token_logprobs": [e.logprob for e in entries],
        "top_logprobs": [{decode(t): lp for t, lp in e.top} for e in entries],
        "text_offset": offsets,
    }


def _response_format(body: dict[str, Any], req: GenerationRequest) -> None:
    """OpenAI's ``response_format``: text (no constraint), json_object, or json_schema
    (``{"json_schema": {"name", "schema", "strict"}}``)."""
    rf = _get(body, "response_format")
    if rf is None:
        return
    if not isinstance(rf, dict):
        raise bad("response_format", f"'response_format' must be an object, got {_jtype(rf)}")
    kind = rf.get("type", "text")
    if kind == "text":
        return
    if req.constraint is not None:
        raise bad("response_format", f"give one of 'response_format' and '{EXTENSION}.regex' / '.choice'")
    if kind == "json_object":
        req.constraint = ("json_object", None)
        return
    if kind != "json_schema":
        raise bad(
            "response_format",
            f"'response_format.type' must be text, json_object or json_schema, got {kind!r}",
        )
    js = rf.get("json_schema")
    if not isinstance(js, dict):
        raise bad("response_format", "'response_format.json_schema' must be an object with a 'schema'")
    schema = js.get("schema")
    if schema is None:
        raise bad("response_format", "'response_format.json_schema.schema' is required")
    req.constraint = _checked("response_format", "json_schema", schema)


def _checked(param: str, kind: str, spec: Any) -> tuple[str, Any]:
    """(kind, spec) once its grammar compiles; a 400 naming ``param`` otherwise."""
    from fastforward.core.grammar import grammar_for
    from fastforward.errors import FastForwardError

    try:
        grammar_for(kind, spec)
    except FastForwardError as e:
        raise bad(param, str(e)) from None
    return kind, spec


def parse_chat(body: Any) -> GenerationRequest:
    """Check a /v1/chat/completions body."""
    req = _common(body, "chat")
    messages = _get(body, "messages")
    if messages is None:
        raise bad("messages", "'messages' is required")
    if not isinstance(messages, list) or not messages:
        raise bad("messages", "'messages' must be a non-empty array")
    req.messages = [_message(i, m) for i, m in enumerate(messages)]
    _tools(body, req)
    return req


TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _tools(body: dict[str, Any], req: GenerationRequest) -> None:
    """``tools`` with ``tool_choice`` "required" or a named function: the answer is constrained to one call,
    ``{"name": ..., "arguments": {...}}`` with the function's parameters schema (an exact constraint, so any
    method gives constrained AR's call); "none" decodes text. "auto" (a free choice between text and a call)
    is refused: deciding that needs the model's own tool-call format, which differs per model."""
    tools = _get(body, "tools")
    choice = _get(body, "tool_choice")
    if tools is None:
        if choice not in (None, "none"):
            raise bad("tool_choice", "'tool_choice' needs 'tools'")
        return
    if not isinstance(tools, list) or not tools:
        raise bad("tools", "'tools' must be a non-empty array")
    names: list[str] = []
    for i, t in enumerate(tools):
        fn = t.get("function") if isinstance(t, dict) else None
        if not isinstance(t, dict) or t.get("type") != "function" or not isinstance(fn, dict):
            raise bad("tools", f'\'tools[{i}]\' must be {{"type": "function", "function": {{...}}}}')
        name = fn.get("name")
        if not isinstance(name, str) or not TOOL_NAME.fullmatch(name):
            raise bad("tools", f"'tools[{i}].function.name' must be 1-64 letters, digits, _ or -")
        params = fn.get("parameters", {"type": "object"})
        if not isinstance(params, dict):
            raise bad("tools", f"'tools[{i}].function.parameters' must be a JSON schema object")
        names.append(name)
    if len(set(names)) != len(names):
        raise bad("tools", "'tools' names a function twice")
    req.tools = tools
    if choice == "none":
        return
    if choice is None or choice == "auto":
        raise bad(
            "tool_choice",
            "tool_choice 'auto' is not supported: pass 'required' or a named function (the answer is then "
            "a call), or 'none'",
        )
    if choice == "required":
        wanted = tools
    elif isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        name = choice["function"].get("name")
        wanted = [t for t in tools if t["function"]["name"] == name]
        if not wanted:
            raise bad("tool_choice", f"'tool_choice' names '{name}', which is not among 'tools'")
    else:
        raise bad("tool_choice", "'tool_choice' must be 'none', 'required' or {\"type\": \"function\", ...}")
    if req.constraint is not None:
        raise bad(
            "tool_choice", "a tool call and 'response_format' / a regex cannot both constrain the answer"
        )
    req.constraint = _checked("tools", "json_schema", tool_call_schema(wanted))
    req.constraint_param, req.tool_call = "tools", True


def tool_call_schema(tools: list[dict[str, Any]]) -> dict[str, Any]:
    """The JSON schema of one call of any of ``tools``."""
    calls = [
        {
            "type": "object",
            "properties": {
                "name": {"const": t["function"]["name"]},
                "arguments": t["function"].get("parameters", {"type": "object"}),
            },
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        for t in tools
    ]
    return calls[0] if len(calls) == 1 else {"anyOf": calls}


def _message(i: int, m: Any) -> dict[str, str]:
    where = f"messages[{i}]"
    if not isinstance(m, dict):
        raise bad(where, f"'{where}' must be an object, got {_jtype(m)}")
    role = m.get("role")
    if role not in ROLES:
        raise bad(f"{where}.role", f"'{where}.role' must be one of {', '.join(ROLES)}, got {role!r}")
    content = m.get("content")
    calls = m.get("tool_calls")
    if role == "assistant" and content is None and calls is not None:  # an earlier reply that was a call
        return {"role": "assistant", "content": _calls_text(where, calls)}
    if isinstance(content, list):  # content parts: text only
        parts = []
        for part in content:
            if (
                not isinstance(part, dict)
                or part.get("type") != "text"
                or not isinstance(part.get("text"), str)
            ):
                raise bad(f"{where}.content", f"'{where}.content' parts must be text parts")
            parts.append(part["text"])
        content = "".join(parts)
    if not isinstance(content, str):
        raise bad(f"{where}.content", f"'{where}.content' must be a string, got {_jtype(content)}")
    return {"role": ROLES[role], "content": content}


def _calls_text(where: str, calls: Any) -> str:
    """An assistant message's ``tool_calls`` as the text this server decodes a call as (one JSON object per
    call, ``{"name", "arguments"}``), so the conversation goes back through the chat template as text."""
    if not isinstance(calls, list) or not calls:
        raise bad(f"{where}.tool_calls", f"'{where}.tool_calls' must be a non-empty array")
    out = []
    for c in calls:
        fn = c.get("function") if isinstance(c, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise bad(f"{where}.tool_calls", f"'{where}.tool_calls' entries need function.name")
        try:
            args = json.loads(fn.get("arguments") or "{}")
        except (TypeError, json.JSONDecodeError):
            raise bad(
                f"{where}.tool_calls", f"'{where}.tool_calls' arguments must be a JSON string"
            ) from None
        out.append(json.dumps({"name": fn["name"], "arguments": args}))
    return "\n".join(out)


def parse_completion(body: Any) -> GenerationRequest:
    """Check a /v1/completions body (``prompt``: a string, one string in an array, or token ids)."""
    req = _common(body, "completion")
    prompt = _get(body, "prompt")
    if prompt is None:
        raise bad("prompt", "'prompt' is required")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if isinstance(prompt, list):
        if not prompt or not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in prompt):
            raise bad("prompt", "'prompt' must be a string, one string in an array, or an array of token ids")
    elif not isinstance(prompt, str):
        raise bad("prompt", f"'prompt' must be a string, got {_jtype(prompt)}")
    if not prompt:
        raise bad("prompt", "'prompt' is empty")
    req.prompt = prompt
    return req


# --------------------------------------------------------------------------- response bodies


def new_id(kind: str) -> str:
    return ("chatcmpl-" if kind == "chat" else "cmpl-") + uuid.uuid4().hex[:24]


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


@dataclass
class Envelope:
    """What every body and chunk of one response shares."""

    kind: str
    id: str
    model: str
    created: int = field(default_factory=lambda: int(time.time()))

    def chunk(
        self,
        text: str | None,
        finish_reason: str | None = None,
        first: bool = False,
        logprobs: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """One stream chunk: a text delta and/or the finish reason (chat's first chunk carries the role)."""
        if self.kind == "chat":
            delta: dict[str, str] = {}
            if first:
                delta["role"] = "assistant"
            if text is not None:
                delta["content"] = text
            choice: dict[str, Any] = {
                "index": 0,
                "delta": delta,
                "logprobs": logprobs,
                "finish_reason": finish_reason,
            }
            obj = "chat.completion.chunk"
        else:
            choice = {"index": 0, "text": text or "", "logprobs": logprobs, "finish_reason": finish_reason}
            obj = "text_completion"
        return {
            "id": self.id,
            "object": obj,
            "created": self.created,
            "model": self.model,
            "choices": [choice],
        }

    def usage_chunk(self, use: dict[str, int]) -> dict[str, Any]:
        """The last chunk when ``stream_options.include_usage``: no choices, the usage of the whole reply."""
        obj = "chat.completion.chunk" if self.kind == "chat" else "text_completion"
        return {
            "id": self.id,
            "object": obj,
            "created": self.created,
            "model": self.model,
            "choices": [],
            "usage": use,
        }

    def full(
        self,
        text: str,
        finish_reason: str,
        use: dict[str, int],
        logprobs: dict[str, Any] | None = None,
        tool_calls: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """The non-streamed body (``tool_calls``: the message is a call, its content null)."""
        if self.kind == "chat":
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if tool_calls:
                message = {"role": "assistant", "content": None, "tool_calls": tool_calls}
            choice: dict[str, Any] = {
                "index": 0,
                "message": message,
                "logprobs": logprobs,
                "finish_reason": finish_reason,
            }
            obj = "chat.completion"
        else:
            choice = {"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish_reason}
            obj = "text_completion"
        return {
            "id": self.id,
            "object": obj,
            "created": self.created,
            "model": self.model,
            "choices": [choice],
            "usage": use,
        }

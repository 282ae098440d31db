"""The HTTP side: an OpenAI-compatible FastAPI app over one :class:`~fastforward.serve.engine.Engine`.

Endpoints: POST /v1/chat/completions, POST /v1/completions, GET /v1/models, GET /health, GET /metrics.
A request is checked (:mod:`fastforward.serve.protocol`), rendered to token ids, queued for the model
worker, and answered from the worker's events: streamed as server-sent events or collected into one body.

Design points, and why:

- Headers go out only after the first event of the worker: an error that only the decoder can see (a
  method that refuses sampling, a bad option value) still becomes a proper 400 instead of a broken stream.
- Text comes from :class:`~fastforward.core.detok.TextStream`, the same code ``fastforward generate``
  uses: no broken multi-byte characters, stop strings found across steps and never sent; the non-streamed
  body is built from the very same pieces, so streamed and non-streamed replies are equal by construction.
- A client that goes away cancels its job: a streamed response is cancelled by Starlette the moment the
  connection drops; a non-streamed one polls for the disconnect while it waits. Either way ``job.cancel``
  is set and the worker stops at the next committed step.
- Every error is OpenAI's JSON shape (:class:`~fastforward.serve.protocol.APIError`); unexpected
  exceptions are logged and answered with a one-line 500, never a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
import signal
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import uvicorn
from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException

from fastforward.core.constraint import Constraint
from fastforward.core.decoder import GenerationConfig, SamplingConfig
from fastforward.core.detok import TextStream
from fastforward.core.memory import frozen_heap, huge_pages
from fastforward.data import render_prompt
from fastforward.decoders.registry import METHODS
from fastforward.errors import FastForwardError
from fastforward.serve.engine import (
    Aborted,
    Done,
    Engine,
    Event,
    Failed,
    Job,
    QueueFull,
    ShuttingDown,
    Tokens,
)
from fastforward.serve.protocol import (
    APIError,
    Envelope,
    GenerationRequest,
    bad,
    logprobs_body,
    new_id,
    parse_chat,
    parse_completion,
    tool_calls,
    usage,
)

log = logging.getLogger("fastforward.serve")

CONSTRAINT_CACHE = 64  # compiled structured-output grammars kept per server (a schema compiles in ~ms)
ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/metrics")


@dataclass(frozen=True)
class Defaults:
    """What a request gets for the fields it leaves out (the server's CLI flags)."""

    max_tokens: int = 128
    sampling: SamplingConfig = SamplingConfig()


class ClientGone(Exception):  # noqa: N818
    """The client closed the connection before its reply was complete."""


@dataclass(frozen=True)
class Gone:
    """Queued by :func:`watch_disconnect` next to the worker's events when the client disconnects."""


async def watch_disconnect(request: Request, events: asyncio.Queue[Any]) -> None:
    """Wait for the client's ``http.disconnect`` (the body is already read, so nothing else can come) and
    post :class:`Gone`: the reply then ends at once and cancels its job, without polling."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
    events.put_nowait(Gone())


# --------------------------------------------------------------------------- one reply


class Reply:
    """The state of one generation request: its job, the events coming back, and the text built from them."""

    def __init__(
        self,
        engine: Engine,
        tokenizer: Any,
        req: GenerationRequest,
        prompt_ids: list[int],
        method: str,
        options: dict[str, Any],
        config: GenerationConfig,
        arrival: float,
    ) -> None:
        self.engine, self.req, self.method, self.arrival = engine, req, method, arrival
        self.prompt_tokens = len(prompt_ids)
        self.eos = set(config.eos_token_ids)
        self.text = TextStream(tokenizer, req.stop)
        self.events: asyncio.Queue[Event | Gone] = asyncio.Queue()
        self.token_ids: list[int] = []
        self.logprobs: list[Any] = []  # core.logprobs entries of token_ids, when the request asked
        self._sent_logprobs = 0  # how many a stream has sent
        self._text_offset = 0  # legacy completions: where the next entry's text starts in the reply
        self.tokenizer = tokenizer
        self.first_at: float | None = None
        self.last_at: float | None = None
        self.finish_reason: str | None = None  # stop | length, once the reply is complete
        self.done: Done | None = None
        loop = asyncio.get_running_loop()

        def deliver(event: Event) -> None:  # called from the worker thread
            try:
                loop.call_soon_threadsafe(self.events.put_nowait, event)
            except RuntimeError:  # the event loop is gone (server stopped): nobody is listening
                self.job.cancel.set()

        self.job = Job(list(prompt_ids), config, method, options, deliver)

    async def next_text(self) -> str:
        """Wait for the next event and fold it into the reply (see :meth:`apply`)."""
        return self.apply(await self.events.get())

    def apply(self, event: Event | Gone) -> str:
        """Fold one event into the reply; return the text it adds. A failure raises its :class:`APIError`,
        a disconnected client :class:`ClientGone`."""
        if isinstance(event, Gone):
            raise ClientGone
        if isinstance(event, Failed):
            raise APIError(
                event.status,
                event.message,
                "invalid_request_error" if event.status == 400 else "server_error",
            )
        if isinstance(event, Aborted):
            raise APIError(503, "the generation was cancelled (the server is shutting down)", "server_error")
        if isinstance(event, Tokens):
            if self.first_at is None:
                self.first_at = event.at
                self.engine.metrics.ttft.labels(self.method).observe(event.at - self.arrival)
            self.last_at = event.at
            self.token_ids += event.ids
            if event.logprobs is not None:
                self.logprobs += event.logprobs
            piece = self.text.push(event.ids)
            if self.text.stopped:  # a stop string: the reply is complete, the worker may stop
                self.finish_reason = "stop"
                self.job.cancel.set()
            return piece
        self.done = event
        piece = self.text.finish()
        ended_by_eos = bool(self.token_ids) and self.token_ids[-1] in self.eos
        # a constraint whose grammar is complete ends the answer as EOS would
        complete = bool(event.result.stats.extras.get("constraint_complete"))
        self.finish_reason = "stop" if ended_by_eos or complete or self.text.stopped else "length"
        return piece

    def close(self, reason: str) -> None:
        """Account for the reply (metrics) and make sure the worker stops working on it."""
        self.job.cancel.set()
        m, now = self.engine.metrics, time.perf_counter()
        m.request_success.labels(self.method, reason).inc()
        m.generation_tokens.labels(self.method).inc(len(self.token_ids))
        if reason in ("stop", "length", "tool_calls"):
            m.e2e.labels(self.method).observe(now - self.arrival)

    def extension(self) -> dict[str, Any]:
        """Our response extension: the method, what ran (the dtype and kernel path, plain AR steps beside
        parallel ones), tokens per target forward and timings of this generation."""
        job = self.job
        st = self.done.result.stats if self.done is not None else None
        if st is not None:  # the decoder's own stats, complete
            tokens, forwards, decode_s, prefill_s = (
                st.new_tokens,
                st.target_forwards,
                st.wall_time_s,
                st.prefill_time_s,
            )
        else:  # cut short by a stop string: counted from the steps the worker delivered
            tokens, forwards, prefill_s = len(self.token_ids), job.steps, None
            decode_s = (self.last_at or 0.0) - job.started_at if job.started_at is not None else 0.0
        target = self.engine.target
        ext: dict[str, Any] = {
            "method": self.method,
            "dtype": target.dtype,
            "path": getattr(target.model, "fastforward_path", "default"),
            "weights": getattr(target.model, "fastforward_weights", "full"),
            "target_forwards": forwards,
            # decode forwards that fed the last token alone (AR fallback) vs guesses too; None when a stop
            # string cut the generation (only its steps are known, not their widths)
            "ar_steps": st.ar_steps if st is not None else None,
            "parallel_steps": st.parallel_steps if st is not None else None,
            "tokens_per_forward": round(tokens / forwards, 4) if forwards else 0.0,
            "decode_time_s": round(decode_s, 6),
            "prefill_time_s": round(prefill_s, 6) if prefill_s is not None else None,
            "queue_time_s": round(job.started_at - job.submitted_at, 6) if job.started_at else None,
            "ttft_s": round(self.first_at - self.arrival, 6) if self.first_at is not None else None,
            "tokens_per_s": round(tokens / decode_s, 3) if decode_s > 0 else 0.0,
        }
        if st is not None and "auto_choice" in st.extras:
            ext["auto_choice"] = st.extras["auto_choice"]
        if self.req.constraint is not None:  # structured output: what was asked and what the grammar cost
            x = st.extras if st is not None else {}
            ext["constraint"] = {
                "kind": "tool_call" if self.req.tool_call else self.req.constraint[0],
                "complete": bool(x.get("constraint_complete", False)),
                "masks": x.get("constraint_masks"),
                "mask_time_s": round(x["constraint_mask_s"], 6) if "constraint_mask_s" in x else None,
                "jump_forward_proposed": x.get("jump_forward_proposed"),
                "jump_forward_accepted": x.get("jump_forward_accepted"),
            }
        if self.req.return_token_ids:
            ext["token_ids"] = list(self.token_ids)
        return ext

    def usage(self) -> dict[str, int]:
        return usage(self.prompt_tokens, len(self.token_ids))

    def logprobs_body(self, unsent_only: bool = False) -> dict[str, Any] | None:
        """OpenAI's logprobs object for the tokens so far (a stream: those not sent yet); None when the
        request did not ask."""
        if self.req.logprobs is None:
            return None
        start = self._sent_logprobs if unsent_only else 0
        offset = self._text_offset if unsent_only else 0
        entries = self.logprobs[start:]
        self._sent_logprobs = len(self.logprobs)
        body = logprobs_body(self.req.kind, entries, lambda t: self.tokenizer.decode([t]), offset)
        if unsent_only and body is not None and "tokens" in body:
            self._text_offset = offset + sum(len(t) for t in body["tokens"])
        return body


# --------------------------------------------------------------------------- the app


def create_app(
    engine: Engine,
    tokenizer: Any,
    model_name: str,
    api_key: str | None = None,
    defaults: Defaults = Defaults(),  # noqa: B008 - frozen, shared safely
    share_history: bool = False,
) -> FastAPI:
    """The FastAPI app serving ``engine`` under ``model_name``; the worker starts and stops with the app.

    ``api_key``: one key, or several separated by commas (one per user). Each request runs in its key's
    *scope* (``GenerationConfig.scope``), so what a method keeps across requests (suffix's earlier outputs)
    is never read by another key's requests; ``share_history`` puts every key in one scope."""
    keys = [k.strip() for k in (api_key or "").split(",") if k.strip()] or None  # none given: no auth

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        engine.start()
        try:
            # what start-up loaded (the models; with `fastforward serve`, the compiled packages already on disk,
            # which Engine.start(warm=True) loaded in the worker), off the event loop (seconds for GBs); a
            # package first built by a request later keeps the kernel's pages
            await asyncio.to_thread(huge_pages)
            with frozen_heap():  # what start-up loaded is no longer re-scanned by ~200 ms full collections
                yield
        finally:
            await asyncio.to_thread(engine.shutdown)

    app = FastAPI(title="fastforward", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    metrics = engine.metrics
    app.add_middleware(
        StatusCounter, count=lambda endpoint, status: metrics.requests.labels(endpoint, status).inc()
    )

    @app.exception_handler(APIError)
    async def _api_error(_request: Request, exc: APIError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        return JSONResponse(
            APIError(exc.status_code, str(exc.detail), kind).body(), status_code=exc.status_code
        )

    @app.exception_handler(Exception)
    async def _unexpected(_request: Request, exc: Exception) -> JSONResponse:
        log.error("unexpected error: %s: %s", type(exc).__name__, exc)
        return JSONResponse(APIError(500, "internal server error", "server_error").body(), status_code=500)

    def authorize(request: Request) -> None:
        request.state.scope = ""
        if keys is None:
            return
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        given = token.strip().encode()
        # every key compared (constant time each), so the time taken does not say which key was close
        matched = [k for k in keys if hmac.compare_digest(given, k.encode())]
        if scheme.lower() != "bearer" or not matched:
            raise APIError(
                401, "invalid or missing API key (send Authorization: Bearer KEY)", code="invalid_api_key"
            )
        if not share_history:  # a digest, so the key itself is never kept with the text
            request.state.scope = hashlib.sha256(matched[0].encode()).hexdigest()[:16]

    auth = [Depends(authorize)]

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/metrics", dependencies=auth)
    async def prometheus() -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/models", dependencies=auth)
    async def models() -> dict[str, Any]:
        card = {
            "id": model_name,
            "object": "model",
            "created": 0,
            "owned_by": "fastforward",
            "fastforward": {
                "default_method": engine.method,
                "methods": engine.methods,
                "context_length": engine.context_length,
                "dtype": engine.target.dtype,
                "path": getattr(engine.target.model, "fastforward_path", "default"),
                "weights": getattr(engine.target.model, "fastforward_weights", "full"),
            },
        }
        return {"object": "list", "data": [card]}

    @app.post("/v1/chat/completions", dependencies=auth)
    async def chat(request: Request) -> Response:
        return await generate(request, parse_chat(await read_json(request)))

    @app.post("/v1/completions", dependencies=auth)
    async def completions(request: Request) -> Response:
        return await generate(request, parse_completion(await read_json(request)))

    def prepare(req: GenerationRequest, arrival: float, scope: str = "") -> Reply:
        """Everything that can be checked before queueing: model, prompt, context, sampling, method."""
        if req.model is not None and req.model != model_name:
            raise bad(
                "model", f"unknown model '{req.model}'; this server serves '{model_name}'", "model_not_found"
            )
        ids = prompt_ids(req)
        room = engine.context_length - len(ids)
        if room < 1:
            raise bad(
                "messages" if req.kind == "chat" else "prompt",
                f"the prompt ({len(ids)} tokens) is longer than the context ({engine.context_length} tokens)",
                "context_length_exceeded",
            )
        if req.max_tokens is not None and req.max_tokens > room:
            raise bad(
                "max_tokens",
                f"prompt ({len(ids)} tokens) + max_tokens ({req.max_tokens}) exceeds the context "
                f"({engine.context_length} tokens)",
                "context_length_exceeded",
            )
        d = defaults.sampling
        sampling = SamplingConfig(
            temperature=d.temperature if req.temperature is None else req.temperature,
            top_k=d.top_k if req.top_k is None else req.top_k,
            top_p=d.top_p if req.top_p is None else req.top_p,
            seed=d.seed if req.seed is None else req.seed,
        )
        eos = () if req.ignore_eos else engine.target.eos_token_ids
        try:
            method, options = engine.resolve(req.method, req.options)
        except FastForwardError as e:
            raise bad("fastforward", str(e)) from None
        constraint = None
        if req.constraint is not None:
            if METHODS[method].module == "hf_generate":
                raise bad(
                    req.constraint_param, f"method '{method}' cannot decode under a constraint; use 'ar'"
                )
            constraint = compiled_constraint(*req.constraint, param=req.constraint_param)
        if req.logprobs is not None and METHODS[method].module == "hf_generate":
            raise bad("logprobs", f"method '{method}' cannot return logprobs; use 'ar'")
        config = GenerationConfig(
            req.max_tokens or min(defaults.max_tokens, room), eos, sampling, scope, constraint, req.logprobs
        )
        try:
            config.validate()
        except FastForwardError as e:
            raise bad("fastforward", str(e)) from None
        return Reply(engine, tokenizer, req, ids, method, options, config, arrival)

    template_tools = "tools" in str(getattr(tokenizer, "chat_template", "") or "")

    def with_tools(req: GenerationRequest) -> list[dict[str, str]]:
        """The messages, and where the answer must be a call but the chat template does not render tools, a
        system line that lists them (the constraint fixes the call's shape; this tells the model what the
        functions are for)."""
        messages = list(req.messages or [])
        if not req.tool_call or template_tools:
            return messages
        specs = json.dumps([t["function"] for t in req.tools or []])
        line = (
            f'Answer with one function call as JSON {{"name": ..., "arguments": {{...}}}}. Functions: {specs}'
        )
        if messages and messages[0]["role"] == "system":
            return [{"role": "system", "content": messages[0]["content"] + "\n\n" + line}, *messages[1:]]
        return [{"role": "system", "content": line}, *messages]

    constraints: OrderedDict[str, Constraint] = OrderedDict()  # compiled grammars, least recently used out

    def compiled_constraint(kind: str, spec: Any, param: str = "response_format") -> Constraint:
        """The request's constraint compiled for the served tokenizer, kept for the next request with the
        same schema (a server sees the same tool schemas again and again)."""
        key = json.dumps([kind, spec], sort_keys=True)
        hit = constraints.get(key)
        if hit is None:
            try:
                hit = engine.target.constraint(kind, spec)
            except FastForwardError as e:
                raise bad(param, str(e)) from None
            constraints[key] = hit
            while len(constraints) > CONSTRAINT_CACHE:
                constraints.popitem(last=False)
        constraints.move_to_end(key)
        return hit

    def prompt_ids(req: GenerationRequest) -> list[int]:
        if req.kind == "chat":
            try:
                return render_prompt(tokenizer, with_tools(req), req.tools)
            except Exception as e:  # the chat template rejected the conversation (e.g. role order)
                raise bad("messages", f"the chat template rejected the messages: {e}") from None
        if isinstance(req.prompt, list):
            if max(req.prompt) >= len(tokenizer):
                raise bad(
                    "prompt", f"token id {max(req.prompt)} is outside the vocabulary ({len(tokenizer)})"
                )
            return list(req.prompt)
        return list(tokenizer(req.prompt)["input_ids"])

    async def generate(request: Request, req: GenerationRequest) -> Response:
        reply = prepare(req, time.perf_counter(), getattr(request.state, "scope", ""))
        try:
            engine.submit(reply.job)
        except QueueFull as e:
            raise APIError(
                429,
                f"the server is busy: {e}",
                "rate_limit_error",
                code="queue_full",
                headers={"Retry-After": str(e.retry_after)},
            ) from None
        except ShuttingDown as e:
            raise APIError(503, str(e), "server_error") from None
        metrics.prompt_tokens.labels(reply.method).inc(reply.prompt_tokens)
        env = Envelope(req.kind, new_id(req.kind), model_name)
        watcher = asyncio.create_task(watch_disconnect(request, reply.events))
        try:  # the first event (an error the decoder finds still becomes a JSON error), or the whole reply
            text = await reply.next_text()
            while not req.stream and reply.finish_reason is None:
                text += await reply.next_text()
        except ClientGone:
            reply.close("cancelled")
            return Response(status_code=499)
        except APIError:
            reply.close("error")
            raise
        finally:  # a streamed response watches for the disconnect itself (Starlette cancels the stream)
            watcher.cancel()
            await asyncio.wait([watcher])
        if req.stream:
            headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
            return StreamingResponse(
                stream(reply, env, text), media_type="text/event-stream", headers=headers
            )
        calls = tool_calls(text) if req.tool_call and reply.finish_reason == "stop" else None
        if calls:
            reply.finish_reason = "tool_calls"
        reply.close(reply.finish_reason or "length")
        body = env.full(text, reply.finish_reason or "length", reply.usage(), reply.logprobs_body(), calls)
        body["fastforward"] = reply.extension()
        return JSONResponse(body)

    async def stream(reply: Reply, env: Envelope, first: str) -> AsyncIterator[str]:
        reason = "cancelled"  # unless the loop below completes; a dropped connection cancels this generator
        use = {"usage": None} if reply.req.include_usage else {}
        try:
            if env.kind == "chat":
                yield sse({**env.chunk("", first=True), **use})
            calling = reply.req.tool_call  # a call is sent whole once complete, not as text deltas
            held = first
            if first and not calling:
                yield sse({**env.chunk(first, logprobs=reply.logprobs_body(True)), **use})
            while reply.finish_reason is None:
                piece = await reply.next_text()
                held += piece
                if piece and not calling:
                    yield sse({**env.chunk(piece, logprobs=reply.logprobs_body(True)), **use})
            calls = tool_calls(held) if calling and reply.finish_reason == "stop" else None
            if calls:
                reply.finish_reason = "tool_calls"
                chunk = env.chunk(None, logprobs=reply.logprobs_body(True))
                chunk["choices"][0]["delta"] = {"tool_calls": [{"index": 0, **calls[0]}]}
                yield sse({**chunk, **use})
            elif calling and held:  # not a complete call (the length cap): the text as it stands
                yield sse({**env.chunk(held, logprobs=reply.logprobs_body(True)), **use})
            reason = reply.finish_reason
            end = reply.logprobs_body(True)  # tokens whose text no chunk has shown (held-back bytes)
            if end is not None and not (end.get("content") or end.get("tokens")):
                end = None
            text = None if env.kind == "chat" else ""
            last = {**env.chunk(text, reply.finish_reason, logprobs=end), **use}
            last["fastforward"] = reply.extension()
            yield sse(last)
            if reply.req.include_usage:
                yield sse(env.usage_chunk(reply.usage()))
            yield "data: [DONE]\n\n"
        except ClientGone:  # a disconnect seen just before the stream began
            return
        except APIError as e:  # the worker failed after the stream began: OpenAI streams the error object
            reason = "error"
            yield sse(e.body())
            yield "data: [DONE]\n\n"
        finally:
            reply.close(reason)

    return app


async def read_json(request: Request) -> Any:
    raw = await request.body()
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise bad(None, f"the request body is not valid JSON: {e}") from None


def sse(obj: dict[str, Any]) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"


class StatusCounter:
    """ASGI middleware counting answered requests by endpoint and status (fixed endpoint set: no label blow-up).

    Pure ASGI rather than FastAPI's ``@app.middleware``: the latter wraps streaming responses in a way that
    delays seeing the client's disconnect."""

    def __init__(self, app: Callable[..., Awaitable[None]], count: Callable[[str, str], None]) -> None:
        self.app, self.count = app, count

    async def __call__(self, scope: dict[str, Any], receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status: dict[str, int] = {}

        async def send_status(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            path = scope.get("path", "")
            self.count(path if path in ENDPOINTS else "other", str(status.get("code", 500)))


# --------------------------------------------------------------------------- running it


def bind(host: str, port: int) -> socket.socket:
    """A listening socket bound here, so port 0 (an ephemeral port) can be reported before serving."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise FastForwardError(f"cannot listen on {host}:{port}: {e.strerror}") from None
    sock.listen(128)
    return sock


def serve_forever(app: FastAPI, sock: socket.socket, shutdown_timeout: float = 30.0) -> None:
    """Run uvicorn on ``sock`` until SIGINT/SIGTERM.

    On either signal uvicorn stops accepting connections, lets in-flight requests finish for up to
    ``shutdown_timeout`` seconds (then cancels them, which cancels their jobs), and the app's lifespan stops
    the worker. uvicorn re-raises the signal it caught once it is done; a no-op SIGTERM handler installed
    here receives it, so a SIGTERM ends in a clean exit (status 0) rather than death by signal."""
    config = uvicorn.Config(app, log_level="info", timeout_graceful_shutdown=shutdown_timeout, lifespan="on")
    server = uvicorn.Server(config)
    previous = signal.signal(signal.SIGTERM, lambda *_: None)
    try:
        server.run(sockets=[sock])
    finally:
        signal.signal(signal.SIGTERM, previous)


class BackgroundServer:
    """uvicorn in a thread on a loopback ephemeral port: for tests and the load script (``with`` block)."""

    def __init__(self, app: FastAPI, host: str = "127.0.0.1", start_timeout: float = 60.0) -> None:
        self.app, self.host, self.start_timeout = app, host, start_timeout
        self.server: uvicorn.Server | None = None
        self.thread: threading.Thread | None = None
        self.url = ""

    def __enter__(self) -> BackgroundServer:
        sock = bind(self.host, 0)
        self.url = f"http://{self.host}:{sock.getsockname()[1]}"
        config = uvicorn.Config(self.app, log_level="warning", lifespan="on", timeout_graceful_shutdown=5)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + self.start_timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the background server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.server is not None and self.thread is not None:
            self.server.should_exit = True
            self.thread.join(30)

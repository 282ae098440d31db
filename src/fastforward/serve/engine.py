"""The model worker: one thread owns the model and decodes queued jobs one at a time.

Why one worker and a queue: the decoders generate one prompt at a time (batch 1, see
:mod:`fastforward.core.decoder`) and a model's forward already uses every CPU core, so running two
generations at once would only make both slower and their timings meaningless. Requests therefore wait in a
bounded FIFO; when it is full the server answers 429 at once (:class:`QueueFull`) rather than letting
latency grow without bound.

Cancellation: every committed step calls the job's ``on_tokens`` callback; once ``job.cancel`` is set (the
client went away, a stop string was found, the server is shutting down) the next callback raises
:class:`Cancelled`, so a generation stops within one decoding step, and a job cancelled while still queued
never starts.

The worker talks to the HTTP side only through ``job.deliver`` (thread-safe; the app posts events onto its
event loop), so this module knows nothing about HTTP.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from fastforward.core.decoder import Decoder, GenerationConfig, GenerationResult, model_context_length
from fastforward.decoders.registry import METHODS, available, build_decoder, option_names
from fastforward.errors import FastForwardError
from fastforward.models.loading import LoadedModel
from fastforward.serve.metrics import ServeMetrics

log = logging.getLogger("fastforward.serve")


class Cancelled(Exception):  # noqa: N818 - a control-flow signal, not an error
    """Raised inside the token callback to end a generation whose job was cancelled."""


class QueueFull(Exception):  # noqa: N818
    """The queue holds ``max_queue`` jobs; ``retry_after`` estimates when a slot frees up (seconds)."""

    def __init__(self, retry_after: int) -> None:
        super().__init__(f"the queue is full; retry in {retry_after}s")
        self.retry_after = retry_after


class ShuttingDown(Exception):  # noqa: N818
    """The server stopped accepting work."""


@dataclass
class Tokens:
    """Token ids committed by one decoding step."""

    ids: list[int]
    at: float  # time.perf_counter() when committed


@dataclass
class Done:
    """The generation ran to EOS or its token limit; the decoder's stats are complete."""

    result: GenerationResult


@dataclass
class Failed:
    """The generation could not run (bad method option, a method refusing sampling) or broke (status 500)."""

    status: int
    message: str


@dataclass
class Aborted:
    """The generation stopped because its job was cancelled."""


Event = Tokens | Done | Failed | Aborted


@dataclass
class Job:
    """One generation request as the worker sees it."""

    prompt_ids: list[int]
    config: GenerationConfig
    method: str
    options: dict[str, Any]
    deliver: Callable[[Event], None]  # must be callable from the worker thread
    cancel: threading.Event = field(default_factory=threading.Event)
    submitted_at: float = field(default_factory=time.perf_counter)
    started_at: float | None = None
    tokens: int = 0  # tokens delivered so far
    steps: int = 0  # committed steps (target forwards) delivered so far
    steps_after_cancel: int = 0  # steps that completed after cancel was set (at most one)
    outcome: str | None = None  # done | failed | cancelled, once the worker is through with the job


class Engine:
    """Owns the target (and optional draft) model, the decoders built for it, the queue and the worker.

    ``method``/``options`` are the server's defaults (``--method``, ``--opt``); ``methods`` limits which
    methods a request may pick (None: every method of the registry this install can build)."""

    def __init__(
        self,
        target: LoadedModel,
        draft: LoadedModel | None = None,
        method: str = "ar",
        options: dict[str, Any] | None = None,
        methods: Sequence[str] | None = None,
        max_queue: int = 64,
        metrics: ServeMetrics | None = None,
        decoder_cache: int = 8,
    ) -> None:
        if max_queue < 1:
            raise FastForwardError(f"--max-queue must be >= 1, got {max_queue}")
        self.target, self.draft = target, draft
        self.metrics = metrics or ServeMetrics()
        self.methods = (
            list(methods) if methods is not None else [n for n, s in METHODS.items() if available(s)]
        )
        for name in self.methods:
            if name not in METHODS:
                raise FastForwardError(f"unknown method '{name}'; known: {', '.join(METHODS)}")
        if method not in self.methods:
            raise FastForwardError(f"the default method '{method}' is not among the served methods")
        self.method = method
        self.options = dict(options or {})
        for key in self.options:
            scope, _, name = key.rpartition(".")
            if scope and (scope not in self.methods or name not in option_names(scope)):
                raise FastForwardError(f"--opt {key}: '{scope}' is not served or has no option '{name}'")
            if not scope and not any(key in option_names(m) for m in self.methods):
                raise FastForwardError(f"--opt {key}: no served method has this option")
        self.context_length = model_context_length(target.model)
        self.max_queue = max_queue
        self._queue: queue.Queue[Job | None] = queue.Queue(maxsize=max_queue)
        self._decoders: OrderedDict[tuple, Decoder] = OrderedDict()
        self._cache_size = decoder_cache
        self._thread: threading.Thread | None = None
        self._closed = False
        self._running: Job | None = None
        self._lock = threading.Lock()
        self._service_s = 1.0  # moving average of a job's time in the worker, for Retry-After
        self.completed = 0  # jobs the worker is through with (any outcome); tests wait on it
        self.last_job: Job | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Build the default decoder (a bad default configuration fails here, not on the first request)
        and start the worker; a second call does nothing."""
        if self._thread is not None:
            return
        self._decoder(self.method, self.resolve(None, {})[1])
        self.metrics.ensure_method(self.method)
        self._thread = threading.Thread(target=self._work, name="fastforward-worker", daemon=True)
        self._thread.start()

    def shutdown(self, timeout: float = 30.0) -> None:
        """Stop accepting jobs, cancel the queued and the running one, and wait for the worker to exit."""
        with self._lock:
            self._closed = True
        while True:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                self._finish(job, "cancelled", Aborted())
        running = self._running
        if running is not None:
            running.cancel.set()
        if self._thread is not None:
            self._queue.put(None)  # the queue was drained, so there is room
            self._thread.join(timeout)
        self.metrics.waiting.set(0)

    @property
    def queued(self) -> int:
        """Jobs waiting for the worker (the running one not included)."""
        return self._queue.qsize()

    @property
    def busy(self) -> bool:
        """Whether a job is queued or decoding."""
        return self._running is not None or self._queue.qsize() > 0

    # ------------------------------------------------------------------ requests

    def resolve(self, method: str | None, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """The method a request runs and its options: the server's unscoped ``--opt`` that the method reads
        and its ``method.key`` ones, overridden by the request's. Unknown or unserved methods and unknown
        option keys are errors."""
        name = method or self.method
        if name not in METHODS:
            raise FastForwardError(f"unknown method '{name}'; served: {', '.join(self.methods)}")
        if name not in self.methods:
            raise FastForwardError(f"method '{name}' is not served here; served: {', '.join(self.methods)}")
        known = option_names(name)
        unknown = sorted(set(options) - known)
        if unknown:
            raise FastForwardError(
                f"{name}: unknown option(s) {', '.join(unknown)}; known: {', '.join(sorted(known)) or 'none'}"
            )
        merged = {k: v for k, v in self.options.items() if k in known}
        merged.update({k[len(name) + 1 :]: v for k, v in self.options.items() if k.startswith(name + ".")})
        merged.update(options)
        return name, merged

    def submit(self, job: Job) -> None:
        """Queue a job, or raise :class:`QueueFull` / :class:`ShuttingDown` at once."""
        with self._lock:
            if self._closed:
                raise ShuttingDown("the server is shutting down")
            try:
                self._queue.put_nowait(job)
            except queue.Full:
                wait = self._service_s * (self._queue.qsize() + 1)
                raise QueueFull(max(1, min(600, round(wait)))) from None
            self.metrics.waiting.set(self._queue.qsize())
        self.metrics.ensure_method(job.method)

    # ------------------------------------------------------------------ the worker

    def _decoder(self, method: str, options: dict[str, Any]) -> Decoder:
        """A decoder per (method, options), built once and kept in a small LRU cache."""
        key = (method, tuple(sorted(options.items())))
        dec = self._decoders.get(key)
        if dec is None:
            dec = build_decoder(method, self.target, self.draft, options)
            self._decoders[key] = dec
            while len(self._decoders) > self._cache_size:
                self._decoders.popitem(last=False)
        self._decoders.move_to_end(key)
        return dec

    def _work(self) -> None:
        while True:
            job = self._queue.get()
            self.metrics.waiting.set(self._queue.qsize())
            if job is None:
                return
            self._running = job
            self.metrics.running.set(1)
            try:
                self._execute(job)
            finally:
                self._running = None
                self.metrics.running.set(0)

    def _execute(self, job: Job) -> None:
        if job.cancel.is_set() or self._closed:
            self._finish(job, "cancelled", Aborted())
            return
        job.started_at = time.perf_counter()
        self.metrics.queue_time.labels(job.method).observe(job.started_at - job.submitted_at)

        def on_tokens(ids: list[int]) -> None:
            if job.cancel.is_set():
                job.steps_after_cancel += 1
                raise Cancelled
            job.tokens += len(ids)
            job.steps += 1
            job.deliver(Tokens(list(ids), time.perf_counter()))

        try:
            decoder = self._decoder(job.method, job.options)
            result = decoder.generate(job.prompt_ids, job.config, on_tokens=on_tokens)
        except Cancelled:
            self._finish(job, "cancelled", Aborted())
        except FastForwardError as e:
            self._finish(job, "failed", Failed(400, str(e)))
        except Exception as e:  # a bug, not the client's input: logged here, a one-line 500 to the client
            log.exception("generation failed (method %s)", job.method)
            self._finish(job, "failed", Failed(500, f"internal error: {type(e).__name__}"))
        else:
            self.metrics.observe_generation(job.method, result.stats)
            self._finish(job, "done", Done(result))

    def _finish(self, job: Job, outcome: str, event: Event) -> None:
        job.outcome = outcome
        if job.started_at is not None:
            spent = time.perf_counter() - job.started_at
            self._service_s = 0.8 * self._service_s + 0.2 * spent
        self.last_job = job
        self.completed += 1
        job.deliver(event)

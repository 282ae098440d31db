"""The model worker: one thread owns the model and decodes the queued jobs, alone or in a continuous batch.

Why one worker and a queue: a model's forward already uses every CPU core (or the whole accelerator), so two
threads running forwards at once would only make both slower and their timings meaningless. Requests
therefore wait in a bounded FIFO; when it is full the server answers 429 at once (:class:`QueueFull`) rather
than letting latency grow without bound.

Why batches (``max_batch_size`` > 1): one forward over B rows costs far less than B forwards (memory-bound
decoding reads the weights once), so concurrent requests are decoded together by a
:class:`~fastforward.core.batching.BatchDecoder`. A batch runs one method with one set of options (the
proposer is shared by its rows); jobs with that same (method, options) join it as slots free up (the others
never restart), and each row keeps its own prompt, :class:`GenerationConfig` (sampling included) and exact
tokens. A job asking for other (method, options) waits at the queue head until the running batch drains, and
while it waits no later job joins ahead of it (FIFO: a steady stream of one method cannot starve another);
then its own batch starts. Every method of ours runs this one path, batch size 1 (the default) included: a
batch of one row is batch 1 (its proposer's timed schedules, the compiled forward's fixed cache when the
model has one). Only transformers' own ``generate()`` (the hf_* peers, not our engine) runs through
:meth:`Engine._execute`.

Cancellation: every committed step calls the job's ``on_tokens`` callback; once ``job.cancel`` is set (the
client went away, a stop string was found, the server is shutting down) the next callback raises
:class:`Cancelled`, and a batch row whose job was cancelled is also dropped before the next batched forward,
so a generation stops within one decoding step without disturbing its neighbours; a job cancelled while
still queued never starts.

The worker talks to the HTTP side only through ``job.deliver`` (thread-safe; the app posts events onto its
event loop), so this module knows nothing about HTTP.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from fastforward.core.batching import BatchDecoder, Request, batched
from fastforward.core.decoder import (
    Cancelled,
    Decoder,
    GenerationConfig,
    GenerationResult,
    model_context_length,
)
from fastforward.core.engine import warm_stored
from fastforward.decoders.registry import METHODS, available, build_decoder, models_run, option_names
from fastforward.errors import FastForwardError
from fastforward.models.loading import LoadedModel
from fastforward.serve.metrics import ServeMetrics

log = logging.getLogger("fastforward.serve")


class QueueFull(Exception):  # noqa: N818
    """The queue holds ``max_queue`` jobs; ``retry_after`` estimates when a slot frees up (seconds)."""

    def __init__(self, retry_after: int) -> None:
        super().__init__(f"the queue is full; retry in {retry_after}s")
        self.retry_after = retry_after


class ShuttingDown(Exception):  # noqa: N818
    """The server stopped accepting work."""


T = TypeVar("T")


def in_own_thread(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in a thread of its own that ends with it (its exception raised here).

    Why: loading may run torch's parallel loops (weight conversion, quantization), and GNU OpenMP keeps a
    thread pool for every thread that ran one, for as long as that thread lives. With the main thread's pool
    and the worker's, a 2-CPU machine has more OpenMP threads than CPUs, and libgomp then lets every pool's
    threads spin only briefly at each barrier before sleeping: a compiled SmolLM2 step ran 3x slower in the
    worker (results/compiled_s50/threads.txt). The pool of a thread that has ended is gone."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="fastforward-load") as one:
        job = one.submit(fn, *args)
    return job.result()  # leaving the block joined the thread; raises fn's exception


@dataclass
class Tokens:
    """Token ids committed by one decoding step."""

    ids: list[int]
    at: float  # time.perf_counter() when committed
    logprobs: list | None = None  # their core.logprobs.TokenLogprob entries, when the request asked


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

    @property
    def key(self) -> tuple[str, tuple[tuple[str, Any], ...]]:
        """What a decoder is built from: jobs with equal keys can share a decoder, and a batch."""
        return decoder_key(self.method, self.options)

    @property
    def reserved(self) -> int:
        """KV positions the job holds in a batch (what ``--token-budget`` counts)."""
        return len(self.prompt_ids) + self.config.max_new_tokens


def decoder_key(method: str, options: dict[str, Any]) -> tuple[str, tuple[tuple[str, Any], ...]]:
    return method, tuple(sorted(options.items()))


class Engine:
    """Owns the target (and optional draft) model, the decoders built for it, the queue and the worker.

    ``method``/``options`` are the server's defaults (``--method``, ``--opt``); ``methods`` limits which
    methods a request may pick (None: every method of the registry this install can build).
    ``max_batch_size`` > 1 decodes concurrent jobs of one (method, options) together; ``token_budget`` (0:
    none) caps the KV positions a batch's rows reserve (prompt + max_new_tokens each)."""

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
        max_batch_size: int = 1,
        token_budget: int = 0,
    ) -> None:
        if max_queue < 1:
            raise FastForwardError(f"--max-queue must be >= 1, got {max_queue}")
        if max_batch_size < 1:
            raise FastForwardError(f"--max-batch-size must be >= 1, got {max_batch_size}")
        if token_budget < 0:
            raise FastForwardError(f"--token-budget must be >= 0 (0: no budget), got {token_budget}")
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
        self.max_batch_size, self.token_budget = max_batch_size, token_budget
        self._pending: deque[Job] = deque()  # the FIFO; guarded by _cond, like _closed and _running
        self._cond = threading.Condition()
        self._decoders: OrderedDict[tuple, Decoder] = OrderedDict()
        # batched form per decoder key; None: a transformers generate() peer (runs alone through _execute)
        self._batches: OrderedDict[tuple, BatchDecoder | None] = OrderedDict()
        self._cache_size = decoder_cache
        self._thread: threading.Thread | None = None
        self._closed = False
        self._running: list[Job] = []
        self._service_s = 1.0  # moving average of a job's time in the worker, for Retry-After
        self.completed = 0  # jobs the worker is through with (any outcome); tests wait on it
        self.last_job: Job | None = None
        self.batch: BatchDecoder | None = None  # the batch decoder that ran last (its stats: tests, logs)

    # ------------------------------------------------------------------ lifecycle

    def start(self, warm: bool = False) -> None:
        """Start the worker and return once it has built the default decoder (a bad default configuration
        fails here, not on the first request) and, with ``warm``, loaded the compiled packages already on disk
        of every model it runs (:meth:`warm`); a second call does nothing.

        Why the worker does both: every torch computation of the server runs in that one thread. GNU OpenMP
        (torch's, and the compiled kernels') keeps a thread pool per thread that has run a parallel region;
        once the pools' threads outnumber the CPUs, every pool's threads stop spinning at barriers and sleep
        on each of a step's few hundred parallel regions. Packages loaded and run once in another thread
        (session 49's start-up, reverted) made a 2-CPU server's compiled AR step 3x slower (27.7 ms vs
        9.1; results/compiled_s50/threads.txt)."""
        if self._thread is not None:
            return
        ready: Future[None] = Future()
        self._thread = threading.Thread(
            target=self._work, args=(ready, warm), name="fastforward-worker", daemon=True
        )
        self._thread.start()
        try:
            ready.result()
        except BaseException:
            self._thread.join()
            self._thread = None
            raise
        self.metrics.ensure_method(self.method)

    def warm(self) -> float:
        """Load the compiled packages already on disk for every model the decoders built so far run (the
        target, the draft, a drafter's own: qsd's quantized copy, layerskip's layers; :func:`models_run`),
        building none, so that a server's start-up holds them before :func:`fastforward.core.memory.huge_pages`
        moves its memory onto 2 MB pages; a bucket without one still compiles on its first use. Returns the
        seconds spent. Call it from the worker (:meth:`start`)."""
        models = {id(m): m for d in self._decoders.values() for m in models_run(d, self.target, self.draft)}
        return sum(warm_stored(m) for m in models.values())

    def shutdown(self, timeout: float = 30.0) -> None:
        """Stop accepting jobs, cancel the queued and the running ones, and wait for the worker to exit."""
        with self._cond:
            self._closed = True
            drained = list(self._pending)
            self._pending.clear()
            running = list(self._running)
            self._cond.notify_all()
        for job in drained:
            self._finish(job, "cancelled", Aborted())
        for job in running:
            job.cancel.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self.metrics.waiting.set(0)

    @property
    def queued(self) -> int:
        """Jobs waiting for the worker (the running ones not included)."""
        return len(self._pending)

    @property
    def busy(self) -> bool:
        """Whether a job is queued or decoding."""
        return bool(self._running) or bool(self._pending)

    def running_jobs(self) -> list[Job]:
        """The jobs being decoded now (one, or a batch's rows)."""
        with self._cond:
            return list(self._running)

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
        with self._cond:
            if self._closed:
                raise ShuttingDown("the server is shutting down")
            if len(self._pending) >= self.max_queue:
                # a batch serves up to max_batch_size jobs in about one job's time
                wait = self._service_s * (len(self._pending) + 1) / self.max_batch_size
                raise QueueFull(max(1, min(600, round(wait))))
            self._pending.append(job)
            self.metrics.waiting.set(len(self._pending))
            self._cond.notify()
        self.metrics.ensure_method(job.method)

    # ------------------------------------------------------------------ decoders

    def _decoder(self, method: str, options: dict[str, Any]) -> Decoder:
        """A decoder per (method, options), built once and kept in a small LRU cache."""
        key = decoder_key(method, options)
        dec = self._decoders.get(key)
        if dec is None:
            dec = build_decoder(method, self.target, self.draft, options)
            self._decoders[key] = dec
            while len(self._decoders) > self._cache_size:
                self._decoders.popitem(last=False)
        self._decoders.move_to_end(key)
        return dec

    def _batch_for(self, job: Job) -> BatchDecoder | None:
        """The batch decoder for the job's (method, options), or None: a peer's ``generate()``, run alone
        (also when its decoder cannot be built: :meth:`_execute` then reports why)."""
        key = job.key
        if key in self._batches:
            self._batches.move_to_end(key)
            return self._batches[key]
        try:
            decoder = self._decoder(job.method, job.options)
        except Exception:
            return None
        try:
            batch: BatchDecoder | None = batched(decoder, self.max_batch_size, self.token_budget)
        except FastForwardError as e:
            log.info("%s runs outside the batches: %s", job.method, e)
            batch = None
        self._batches[key] = batch
        while len(self._batches) > self._cache_size:
            self._batches.popitem(last=False)
        return batch

    # ------------------------------------------------------------------ the worker

    def _work(self, ready: Future[None], warm: bool) -> None:
        try:
            self._decoder(self.method, self.resolve(None, {})[1])
            if warm:
                self.warm()
        except BaseException as e:  # start() raises it in its caller
            ready.set_exception(e)
            return
        ready.set_result(None)
        while (job := self._take()) is not None:
            batch = self._batch_for(job)
            if batch is not None:
                self._run_batch(batch, job)
                continue
            self._set_running([job])
            try:
                self._execute(job)
            finally:
                self._set_running([])

    def _take(self) -> Job | None:
        """The queue's head, waiting for one; None once the server is closed."""
        with self._cond:
            while not self._pending and not self._closed:
                self._cond.wait()
            if not self._pending:
                return None
            job = self._pending.popleft()
            self.metrics.waiting.set(len(self._pending))
            return job

    def _set_running(self, jobs: list[Job]) -> None:
        with self._cond:
            self._running = jobs
        self.metrics.running.set(len(jobs))

    def _on_tokens(self, job: Job) -> Callable[[list[int]], None]:
        """The decoder's per-step callback: deliver the step's tokens, or end the generation (raise) once
        the job was cancelled."""

        def on_tokens(ids: list[int]) -> None:
            if job.cancel.is_set():
                job.steps_after_cancel += 1
                raise Cancelled
            job.tokens += len(ids)
            job.steps += 1
            job.deliver(Tokens(list(ids), time.perf_counter(), getattr(ids, "logprobs", None)))

        return on_tokens

    def _start(self, job: Job) -> bool:
        """Mark the job started (queue-time metric); False, with the job finished, if it was cancelled."""
        if job.cancel.is_set() or self._closed:
            self._finish(job, "cancelled", Aborted())
            return False
        job.started_at = time.perf_counter()
        self.metrics.queue_time.labels(job.method).observe(job.started_at - job.submitted_at)
        return True

    def _execute(self, job: Job) -> None:
        """One job alone through a decoder that is not a proposer (a transformers ``generate()`` peer)."""
        if not self._start(job):
            return
        try:
            decoder = self._decoder(job.method, job.options)
            result = decoder.generate(job.prompt_ids, job.config, on_tokens=self._on_tokens(job))
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

    def _run_batch(self, batch: BatchDecoder, first: Job) -> None:
        """Decode ``first`` and every job of the same key that reaches the queue head while this batch
        runs, one batched forward per step, until the batch drains."""
        self.batch = batch
        live: list[tuple[Job, Request]] = []
        self._hand(batch, first, live)
        while live:
            for job in self._joiners(first.key, live):
                self._hand(batch, job, live)
            closed = self._closed
            for job, req in live:
                if closed or job.cancel.is_set():
                    batch.cancel(req)  # leaves at this step's commit, without its callback
            forwards, row_steps = batch.stats.forwards, batch.stats.row_steps
            try:
                batch.step()
            except Exception as e:
                self._fail_batch(first, live, e)
                return
            if batch.stats.forwards > forwards:
                rows = batch.stats.row_steps - row_steps
                self.metrics.batch_forward_rows.labels(first.method).observe(rows)
            self.metrics.batch_rows.set(len(batch.rows))
            # finished rows, and requests the batch dropped while they waited (cancelled)
            through = [x for x in live if x[1].done]
            live[:] = [x for x in live if not x[1].done]
            for job, req in through:
                self._settle(job, req)
            self._set_running([job for job, _ in live])
        self.metrics.batch_rows.set(0)

    def _joiners(self, key: tuple, live: list[tuple[Job, Request]]) -> list[Job]:
        """Jobs to add to the running batch now: from the queue head, while it holds jobs of the batch's
        key and the batch has a free slot and budget. A job of another key at the head stops the joining
        (it runs next); a cancelled one is taken off (and finished) wherever it waits in line."""
        out: list[Job] = []
        with self._cond:
            reserved = sum(job.reserved for job, _ in live)
            while self._pending and len(live) + len(out) < self.max_batch_size:
                head = self._pending[0]
                if not head.cancel.is_set():
                    if head.key != key:
                        break
                    budget = self.token_budget
                    # over the budget on its own: let it through, the batch refuses it with a 400
                    if budget and head.reserved <= budget and reserved + head.reserved > budget:
                        break
                    reserved += head.reserved
                out.append(self._pending.popleft())
            self.metrics.waiting.set(len(self._pending))
        return out

    def _hand(self, batch: BatchDecoder, job: Job, live: list[tuple[Job, Request]]) -> None:
        """Queue a job in the batch decoder (admitted at the next step; the caller checked the room)."""
        if not self._start(job):
            return
        req = Request(job.prompt_ids, job.config, self._on_tokens(job), tag=job)
        try:
            batch.submit(req)
        except FastForwardError as e:  # e.g. prompt + max_tokens over --token-budget
            self._finish(job, "failed", Failed(400, str(e)))
            return
        live.append((job, req))
        self._set_running([j for j, _ in live])

    def _settle(self, job: Job, req: Request) -> None:
        """Report a request the batch is through with."""
        if req.result is not None:
            self.metrics.observe_generation(job.method, req.result.stats)
            self._finish(job, "done", Done(req.result))
        elif isinstance(req.error, Cancelled) or job.cancel.is_set():
            self._finish(job, "cancelled", Aborted())
        elif isinstance(req.error, FastForwardError):
            self._finish(job, "failed", Failed(400, str(req.error)))
        else:
            log.error("generation failed (method %s)", job.method, exc_info=req.error)
            self._finish(job, "failed", Failed(500, f"internal error: {type(req.error).__name__}"))

    def _fail_batch(self, first: Job, live: list[tuple[Job, Request]], error: Exception) -> None:
        """A batched step raised: its state (rows, cache) cannot be trusted, so every job still in it fails
        and the batch decoder is rebuilt for the next jobs of this key."""
        if isinstance(error, FastForwardError):
            failure = Failed(400, str(error))
        else:
            log.error("batched step failed (method %s)", first.method, exc_info=error)
            failure = Failed(500, f"internal error: {type(error).__name__}")
        for job, req in live:
            if req.done:  # finished (or was cancelled) before the step broke
                self._settle(job, req)
            else:
                self._finish(job, "failed", failure)
        live.clear()
        batch = self._batches.pop(first.key, None)
        if batch is not None:
            batch.close()  # its rows' cache (a compiled forward's fixed cache) goes back
        self._set_running([])
        self.metrics.batch_rows.set(0)

    def _finish(self, job: Job, outcome: str, event: Event) -> None:
        job.outcome = outcome
        if job.started_at is not None:
            spent = time.perf_counter() - job.started_at
            self._service_s = 0.8 * self._service_s + 0.2 * spent
        self.last_job = job
        self.completed += 1
        job.deliver(event)

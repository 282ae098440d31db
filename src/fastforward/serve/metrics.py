"""Prometheus metrics of the server, named after vLLM's (``vllm:`` -> ``fastforward:``) so dashboards carry over.

Why these: an operator wants to know whether requests succeed and how long they wait (requests by status,
queue depth, time to first token, end-to-end latency), how much work flows through (prompt and generated
tokens) and, per decoding method, whether the speculation pays: target forwards, draft tokens proposed and
accepted. Mean tokens per target forward is ``generation_tokens_total / target_forwards_total`` and the
mean acceptance length is ``1 + num_accepted_tokens_total / num_drafts_total``, both derived by the reader
from counters (rates of sums, never averages of per-request rates; see :mod:`fastforward.core.metrics`).
With continuous batching (``--max-batch-size`` > 1) the operator also wants to know whether requests do
share forwards: the rows of the running batch (a gauge) and the rows of every batched forward (a histogram,
whose sum over count is the mean batch).

Every server owns its own :class:`CollectorRegistry`, so several servers in one process (tests) never share
counts.
"""

from __future__ import annotations

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from fastforward.core.stats import DecodeStats

# Seconds: from well under one decoding step up to a long answer behind a queue.
LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 320.0)

# Rows per batched forward: powers of two up to far more rows than a CPU or one GPU batch holds.
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)

prometheus_client.disable_created_metrics()  # the *_created series only clutter a scrape


def draft_counts(stats: DecodeStats) -> tuple[int, int, list[int], list[int]]:
    """(draft tokens proposed, draft tokens accepted, proposed and accepted per draft position) of one run.

    Accepted draft tokens are the tokens a forward committed beyond the one the target always adds, the same
    for every method (plain AR: 0). Proposed tokens are the guesses every decode forward fed beside the last
    committed token (its width minus one), so they are counted the same way for every method: the draft
    chain of the sd family and pld, the Jacobi block, lookahead's window and pooled n-grams, Chimera's tree."""
    accepted = sum(max(0, k - 1) for k in stats.accepted_per_step)
    ex = stats.extras
    proposed = stats.drafted_tokens
    return (
        proposed,
        accepted,
        list(ex.get("spec_proposed_per_position", [])),
        list(ex.get("spec_accepted_per_position", [])),
    )


class ServeMetrics:
    """The server's metrics in one registry; the app and the engine call the ``observe_*`` methods."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        p = "fastforward:"
        self.requests = Counter(
            p + "requests",
            "HTTP requests answered, by endpoint and status code",
            ["endpoint", "status"],
            registry=r,
        )
        self.request_success = Counter(
            p + "request_success",
            "generations ended, by method and finished reason (stop, length, cancelled, error)",
            ["method", "finished_reason"],
            registry=r,
        )
        self.waiting = Gauge(p + "num_requests_waiting", "requests queued for the model worker", registry=r)
        self.running = Gauge(p + "num_requests_running", "requests the model worker is decoding", registry=r)
        self.batch_rows = Gauge(
            p + "num_batch_rows",
            "rows of the running continuous batch (--max-batch-size > 1; 0 when none runs)",
            registry=r,
        )

        def per_method(kind, name: str, doc: str, *extra: str, **kw):  # one label set for most series
            return kind(p + name, doc, ["method", *extra], registry=r, **kw)

        def latency(name: str, doc: str) -> Histogram:
            return per_method(Histogram, name, doc, buckets=LATENCY_BUCKETS)

        # count: batched target forwards; sum: rows over them (mean rows per forward = sum / count)
        self.batch_forward_rows = per_method(
            Histogram, "batch_forward_rows", "rows in each batched target forward", buckets=BATCH_BUCKETS
        )
        self.prompt_tokens = per_method(Counter, "prompt_tokens", "prompt tokens of started generations")
        self.generation_tokens = per_method(
            Counter, "generation_tokens", "tokens generated (all generations, cancelled ones included)"
        )
        self.ttft = latency(
            "time_to_first_token_seconds",
            "from request arrival to the first generated token (queue wait included)",
        )
        self.e2e = latency("e2e_request_latency_seconds", "from request arrival to the last token")
        self.queue_time = latency("request_queue_time_seconds", "time spent waiting for the model worker")
        # Speculative-decoding counters, per method; complete generations only (see observe_generation).
        self.spec_tokens = per_method(
            Counter,
            "spec_decode_generation_tokens",
            "tokens of generations counted below (divide by target_forwards for tokens per forward)",
        )
        self.forwards = per_method(
            Counter, "spec_decode_num_target_forwards", "target-model forwards, prefill included"
        )
        self.drafts = per_method(
            Counter,
            "spec_decode_num_drafts",
            "verification forwards that fed at least one guess (AR fallback steps are counted apart)",
        )
        self.ar_steps = per_method(
            Counter,
            "spec_decode_num_ar_steps",
            "decode forwards that fed the last token alone: plain AR, or a method's fallback (step gate, "
            "gamma_auto choosing no draft, a drafter that found nothing)",
        )
        self.draft_tokens = per_method(
            Counter,
            "spec_decode_num_draft_tokens",
            "guessed tokens fed to the target beside the last committed one (every method)",
        )
        self.auto_choice = per_method(
            Counter, "auto_choice", "generations of --method auto, by the method it chose", "choice"
        )
        self.accepted_tokens = per_method(
            Counter,
            "spec_decode_num_accepted_tokens",
            "draft tokens accepted: tokens a forward committed beyond the target's own token",
        )
        self.accepted_per_pos = per_method(
            Counter,
            "spec_decode_num_accepted_tokens_per_pos",
            "draft tokens accepted at each draft position (draft-then-verify methods)",
            "position",
        )
        self.proposed_per_pos = per_method(
            Counter,
            "spec_decode_num_draft_tokens_per_pos",
            "draft tokens proposed at each draft position (draft-then-verify methods)",
            "position",
        )

    def ensure_method(self, method: str) -> None:
        """Create a method's series at zero, so a scrape lists every loaded method before it is used."""
        counters = (self.prompt_tokens, self.generation_tokens, self.spec_tokens, self.forwards, self.drafts)
        for c in (*counters, self.ar_steps, self.draft_tokens, self.accepted_tokens):
            c.labels(method)

    def observe_generation(self, method: str, stats: DecodeStats) -> None:
        """Count one generation that ran to its end (EOS or the token limit) with the decoder's own stats.

        Generations cut short (stop string, client gone) have no complete stats, so they add only to the
        token counters; the spec-decode counters stay exact sums over whole generations."""
        self.spec_tokens.labels(method).inc(stats.new_tokens)
        self.forwards.labels(method).inc(stats.target_forwards)
        self.drafts.labels(method).inc(stats.parallel_steps)
        self.ar_steps.labels(method).inc(stats.ar_steps)
        proposed, accepted, prop_at, acc_at = draft_counts(stats)
        self.accepted_tokens.labels(method).inc(accepted)
        self.draft_tokens.labels(method).inc(proposed)
        if "auto_choice" in stats.extras:
            self.auto_choice.labels(method, str(stats.extras["auto_choice"])).inc()
        for i, n in enumerate(prop_at):
            self.proposed_per_pos.labels(method, str(i)).inc(n)
        for i, n in enumerate(acc_at):
            self.accepted_per_pos.labels(method, str(i)).inc(n)

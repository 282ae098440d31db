"""Batch > 1: many requests decoded together, each row exact, rows joining as others finish.

The loop is the batch-1 loop of :mod:`fastforward.core.decoder` run over rows: *propose* (a
:class:`Proposer` returns each row's guessed tokens as a tree under the row's anchor, its last committed
token), *verify* (ONE target forward over every row's [anchor ; guesses], ragged rows padded and masked by
:mod:`fastforward.core.engine`), *accept* (per row, the method's :class:`~fastforward.core.acceptance.Rule`, the one every method and batch 1
verify through)
and *commit* (per row, :meth:`fastforward.core.decoder.Run.commit`: the same EOS and ``max_new_tokens`` cut as
batch 1). Each row commits its own number of tokens per step (ragged acceptance); the cache keeps every row's
accepted entries contiguous (:func:`fastforward.core.engine.compact`).

Continuous batching (:class:`BatchDecoder`): requests wait in a FIFO; before every step, while a slot is free
(``max_batch_size``) and the reserved KV positions stay within ``token_budget`` (prompt + max_new_tokens of
every running row; 0 = no budget), the next request is prefilled alone (a batch-1 forward, so its first
token is exactly batch-1 AR's) and its cache rows are appended. A finished row (EOS, length cap, cancelled)
leaves at once; the others never restart.

Statistics: every row has its own :class:`DecodeStats` (target forwards it took part in, tokens each
committed, its prefill, its wall time from admission to its last token), and :class:`BatchStats` counts
the batch: forwards, rows and nodes per forward, tokens, wall time (aggregate throughput).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from fastforward.core.acceptance import EXACT, Rule, Verdict
from fastforward.core.compiled import compiled
from fastforward.core.constraint import subtree
from fastforward.core.decoder import (
    STEP_ROOM,
    Cancelled,
    Decoder,
    GenerationConfig,
    GenerationResult,
    Run,
    TokenCallback,
    model_context_length,
)
from fastforward.core.engine import Block, ModelEngine, prefill
from fastforward.core.ragged import LAYOUTS
from fastforward.core.sampling import make_generator, select_token
from fastforward.core.stats import DecodeStats
from fastforward.errors import FastForwardError


@dataclass
class Draft:
    """A row's guesses for one step: ``tokens`` with ``parents`` indexing into them, -1 = the row's anchor
    (a chain is ``[-1, 0, 1, ...]``); ``probs`` [len(tokens), V] the distributions they were sampled from
    (None: deterministic guesses, point masses to rejection sampling)."""

    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    probs: torch.Tensor | None = None
    # the first ``context`` tokens are fed for their outputs only, never judged as guesses (lookahead's
    # Jacobi window): the rule sees the anchor and the rest, whose parents are the anchor or each other
    context: int = 0

    @staticmethod
    def chain(tokens: Sequence[int], probs: torch.Tensor | None = None) -> Draft:
        return Draft([int(t) for t in tokens], list(range(-1, len(tokens) - 1)), probs)

    @staticmethod
    def below(nodes: Sequence[int], parents: Sequence[int], context: int = 0) -> Draft:
        """The guesses of a tree grown from the anchor (``nodes[0]`` the anchor, ``parents[0] == -1``, the
        block layout a method builds its tree in), re-indexed under the anchor."""
        return Draft([int(t) for t in nodes[1:]], [p - 1 for p in parents[1:]], context=context)


@dataclass
class Request:
    """One prompt to decode. Filled in by the decoder: ``result`` (or ``error``) and the times
    (``time.perf_counter()``) it was submitted, admitted, got its first token and finished."""

    prompt: list[int]
    config: GenerationConfig
    on_tokens: TokenCallback | None = None
    tag: Any = None  # the caller's handle (a server job, a sample index)
    result: GenerationResult | None = None
    error: BaseException | None = None
    submitted_at: float = 0.0
    admitted_at: float = 0.0
    first_token_at: float = 0.0
    finished_at: float = 0.0
    cancelled: bool = False

    @property
    def done(self) -> bool:
        return self.result is not None or self.error is not None

    @property
    def latency_s(self) -> float:
        """Submission to last token: queueing included, what a user waits."""
        return self.finished_at - self.submitted_at


@dataclass
class Row:
    """A running request: its committed state (``run``) and the proposer's per-row ``state``; how many
    cache slots hold its tokens is the layout's business (:mod:`fastforward.core.engine`)."""

    request: Request
    run: Run
    generator: torch.Generator | None
    state: Any = None
    rule: Rule = EXACT  # the proposer's acceptance rule, this row's copy (a stateful rule's state is per row)
    jumped: bool = (
        False  # this step's draft was the grammar's forced tokens, not the proposer's (jump-forward)
    )
    # the engine holding this row alone (batch 1; None in a batch): a draft that is the target's own first
    # layers drafts on its cache (:class:`fastforward.decoders.speculative.drafters.ModelDrafter`)
    engine: Any = None

    @property
    def anchor(self) -> int:
        return self.run.tokens[-1]

    @property
    def sequence(self) -> list[int]:
        return self.request.prompt + self.run.tokens

    @property
    def room(self) -> int:
        """Tokens this row may still commit after the anchor."""
        return self.run.config.max_new_tokens - len(self.run.tokens)


@dataclass
class Verified:
    """What a proposer observes of a step's verify forward, per row b: the target's argmax after every node
    (``argmax[b]``), its logits there (``logits[b]`` [m_b, V], grammar-masked for a constrained row), its last
    hidden states (``hidden[b]`` [m_b, d], when the proposer asked), and how long the step's propose and
    forward took. Those times are a row's own cost only when it ran alone (``solo``: batch 1); in a batch
    the forward's time is shared, so a cost-sized proposer reads the machine's cost curve instead."""

    argmax: list[list[int]]
    logits: list[torch.Tensor]
    hidden: list[torch.Tensor] | None
    propose_ms: float = 0.0  # the step's proposing (drafts, jump-forward, pruning)
    forward_ms: float = 0.0  # the model call alone
    verify_ms: float = 0.0  # the forward with its inputs, acceptance, commit and cache bookkeeping
    solo: bool = False


class Proposer:
    """A method's drafter over a batch. Rows keep their order; a proposer with batched state of its own
    (a draft model's cache) follows :meth:`admit` (a row appended last) and :meth:`retain` (rows left)."""

    name: str = "proposer"
    hidden_states: bool = False  # the verify forward must return the target's last hidden states
    rule: Rule = EXACT  # how every row's guesses are judged (the configured method's rule)
    # under a grammar, a row's step may be the grammar's forced tokens instead of the proposer's guesses
    # (jump-forward: ``row.jumped`` is set before propose(), which may skip that row), and deterministic
    # guesses the grammar forbids are dropped before the forward (observe() then sees the pruned draft);
    # False where a proposer's state follows its own draft (a Jacobi iterate, Chimera's heads)
    prunable: bool = False

    def check(self, config: GenerationConfig) -> None:
        """A one-line error for a request this method cannot decode (checked before it is queued)."""

    def admit(self, row: Row, prefill: Any) -> None:
        """A new row, after its prefill (``prefill`` is the model output) and first committed token."""

    def propose(self, rows: Sequence[Row]) -> list[Draft]:
        """Every row's guesses for this step (an empty draft: the row takes an AR step)."""
        raise NotImplementedError

    def observe(
        self, rows: Sequence[Row], drafts: Sequence[Draft], paths: Sequence[list[int]], out: Verified
    ) -> None:
        """After verification and commit: ``paths[b]`` the accepted nodes of row b's block (0 = anchor, node
        i + 1 = ``drafts[b].tokens[i]``), ``out`` what the forward gave (:class:`Verified`). Called before
        finished rows leave."""

    def retain(self, keep: Sequence[int]) -> None:
        """Only rows ``keep`` (indices, ascending) stay in the batch."""

    def row_extras(self, row: Row) -> dict[str, Any]:
        """Per-row counters for the row's stats when it finishes."""
        return {}


@dataclass
class BatchStats:
    """The batch as a whole: aggregate throughput is ``new_tokens / wall_time_s``."""

    method: str
    forwards: int = 0  # batched target forwards (verify steps; prefills are counted per row)
    prefills: int = 0
    row_steps: int = 0  # sum over forwards of the rows in it
    nodes_fed: int = 0  # sum over forwards of rows x block width (padding included)
    real_nodes: int = 0  # sum over forwards of the rows' own block lengths (what a padding-free layout feeds)
    new_tokens: int = 0
    requests: int = 0
    wall_time_s: float = 0.0
    prefill_time_s: float = 0.0  # of the rows' prefills (the rest of the wall time is decoding)
    max_rows: int = 0

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.wall_time_s if self.wall_time_s > 0 else 0.0

    @property
    def padding_share(self) -> float:
        """Share of the positions fed that were padding (0 with the packed layout)."""
        return 1 - self.real_nodes / self.nodes_fed if self.nodes_fed else 0.0

    @property
    def mean_rows(self) -> float:
        return self.row_steps / self.forwards if self.forwards else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "forwards": self.forwards,
            "prefills": self.prefills,
            "mean_rows_per_forward": self.mean_rows,
            "mean_width": self.nodes_fed / self.row_steps if self.row_steps else 0.0,
            "padding_share": self.padding_share,
            "new_tokens": self.new_tokens,
            "requests": self.requests,
            "wall_time_s": self.wall_time_s,
            "prefill_time_s": self.prefill_time_s,
            "aggregate_tok_s": self.tokens_per_s,
            # new tokens per second of decoding (prefills excluded; a prefill's first token counted)
            "decode_tok_s": self.new_tokens / (self.wall_time_s - self.prefill_time_s)
            if self.wall_time_s > self.prefill_time_s
            else 0.0,
            "max_rows": self.max_rows,
        }


class BatchDecoder:
    """Continuous batching over one model and one method (its :class:`Proposer`).

    Drive it with :meth:`submit` + :meth:`step` (a server's worker thread), or :meth:`generate_many`
    (offline throughput). ``submit`` and :meth:`cancel` are thread-safe; ``step`` runs on one thread."""

    def __init__(
        self,
        model: torch.nn.Module,
        proposer: Proposer,
        max_batch_size: int = 8,
        token_budget: int = 0,
        lossless: bool = True,
        layout: str = "padded",
    ) -> None:
        if max_batch_size < 1:
            raise FastForwardError(f"batch size must be >= 1, got {max_batch_size}")
        if token_budget < 0:
            raise FastForwardError(f"token budget must be >= 0, got {token_budget}")
        self.model, self.proposer = model, proposer
        self.name, self.lossless = proposer.name, lossless
        self.max_batch_size, self.token_budget = max_batch_size, token_budget
        self.context_length = model_context_length(model)
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        self.pad_id = pad_token(model)
        self.rows: list[Row] = []
        if layout not in LAYOUTS:
            raise FastForwardError(f"batch layout must be one of {', '.join(LAYOUTS)}, got '{layout}'")
        self.layout = LAYOUTS[layout](model)
        # one row at a time on the engine: prefilled as batch 1 is, through the compiled forward if any
        self.solo = max_batch_size == 1 and isinstance(self.layout, ModelEngine)
        self.waiting: deque[Request] = deque()
        self.lock = threading.Lock()
        self.stats = BatchStats(method=proposer.name)

    # ------------------------------------------------------------------ queue

    def submit(self, request: Request) -> Request:
        """Queue a request (checked now: a bad one is refused in one line, nothing else is affected)."""
        request.config.validate()
        self.proposer.check(request.config)
        if not request.prompt:
            raise FastForwardError("the prompt is empty")
        need = len(request.prompt) + request.config.max_new_tokens
        if need > self.context_length:
            raise FastForwardError(
                f"prompt ({len(request.prompt)} tokens) + max_new_tokens ({request.config.max_new_tokens}) "
                f"exceeds the model's context length ({self.context_length})"
            )
        if self.token_budget and need > self.token_budget:
            raise FastForwardError(
                f"prompt + max_new_tokens ({need}) exceeds the batch token budget ({self.token_budget})"
            )
        request.submitted_at = time.perf_counter()
        with self.lock:
            self.waiting.append(request)
        return request

    def close(self) -> None:
        """Drop every row (and its KV memory; a compiled forward's fixed cache goes back)."""
        self.rows = []
        if isinstance(self.layout, ModelEngine):
            self.layout.reset()

    def cancel(self, request: Request) -> None:
        """Stop a request: dropped from the queue, or its row leaves after the current step."""
        request.cancelled = True

    @property
    def idle(self) -> bool:
        with self.lock:
            return not self.rows and not self.waiting

    def _reserved(self) -> int:
        return sum(len(r.request.prompt) + r.run.config.max_new_tokens for r in self.rows)

    def _next_admissible(self) -> Request | None:
        with self.lock:
            while self.waiting and self.waiting[0].cancelled:
                req = self.waiting.popleft()
                req.error, req.finished_at = Cancelled(), time.perf_counter()
            if not self.waiting or len(self.rows) >= self.max_batch_size:
                return None
            head = self.waiting[0]
            need = len(head.prompt) + head.config.max_new_tokens
            if self.token_budget and self.rows and self._reserved() + need > self.token_budget:
                return None
            return self.waiting.popleft()

    # ------------------------------------------------------------------ the loop

    def step(self) -> list[Request]:
        """Admit what fits, run one batched verify forward, retire finished rows. Returns the requests that
        finished (result or error) during this call."""
        finished: list[Request] = []
        t0 = time.perf_counter()
        with torch.inference_mode():
            while (req := self._next_admissible()) is not None:
                self._admit(req, finished)
            if self.rows:
                self._verify_step(finished)
        self.stats.wall_time_s += time.perf_counter() - t0
        return finished

    def generate_many(
        self,
        prompts: Sequence[Sequence[int]],
        config: GenerationConfig,
        progress: Callable[[int, int], None] | None = None,
    ) -> list[Request]:
        """Decode every prompt (all queued at once, admitted as slots free); requests in input order."""
        reqs = [self.submit(Request(list(map(int, p)), config, tag=i)) for i, p in enumerate(prompts)]
        done = 0
        while not self.idle:
            done += len(self.step())
            if progress:
                progress(done, len(reqs))
        for r in reqs:
            if r.error is not None and not isinstance(r.error, Cancelled):
                raise r.error
        return reqs

    def _admit(self, req: Request, finished: list[Request]) -> None:
        req.admitted_at = time.perf_counter()
        stats = DecodeStats(method=self.name, prompt_tokens=len(req.prompt))
        run = Run(req.config, stats, self._emitter(req))
        row = Row(req, run, make_generator(req.config.sampling, self.device), rule=self.proposer.rule.start())
        ids = torch.tensor([req.prompt], device=self.device)
        t0 = time.perf_counter()
        if self.solo:  # one row at a time: straight into the engine's static (or compiled, fixed) cache
            capacity = len(req.prompt) + req.config.max_new_tokens
            out = self.layout.start(ids, self.proposer.hidden_states, capacity, room=STEP_ROOM)
            cache = None
        else:
            cache, out = prefill(self.model, ids, self.proposer.hidden_states)
        stats.prefill_time_s = time.perf_counter() - t0
        self.stats.prefill_time_s += stats.prefill_time_s
        self.stats.prefills += 1
        self.stats.requests += 1
        if run.matcher is not None:
            run.matcher.mask_row(out.logits[0, -1])
        if run.trace is not None:
            run.trace.observe([-1], [-1], out.logits[0, -1:])
        token = int(select_token(out.logits[0, -1], req.config.sampling, row.generator))
        if not self._commit(row, [token]) or run.done:
            if self.solo:
                self._release(row)
            self._finish(row, finished)
            return
        self.proposer.admit(row, out)
        if cache is not None:
            self.layout.add(cache, len(req.prompt))
        self.rows.append(row)
        self.stats.max_rows = max(self.stats.max_rows, len(self.rows))

    def _verify_step(self, finished: list[Request]) -> None:
        rows = self.rows
        alive = verify_step(self.layout, self.proposer, rows, self.pad_id, self._commit, self.stats)
        if not all(alive):
            keep = [i for i, a in enumerate(alive) if a]
            for i, a in enumerate(alive):
                if not a:
                    if self.solo:
                        self._release(rows[i])
                    self._finish(rows[i], finished)
            self.rows = [rows[i] for i in keep]
            self.proposer.retain(keep)
            self.layout.retain(keep)

    def _commit(self, row: Row, tokens: list[int], width: int = 1) -> bool:
        """Commit through the row's Run; False when the request was cancelled (by flag or by its callback
        raising), which ends the row."""
        if row.request.cancelled:
            row.request.error = Cancelled()
            return False
        try:
            kept = row.run.commit(tokens, width=width)
        except Exception as exc:  # the callback's way to stop a generation (a server's client left)
            row.request.error = exc
            return False
        self.stats.new_tokens += len(kept)
        if not row.request.first_token_at:
            row.request.first_token_at = time.perf_counter()
        return True

    def _release(self, row: Row) -> None:
        """The solo row is through: say what ran its forwards (compiled graphs, or eager and why) and give a
        compiled forward's fixed cache back for the next request."""
        if compiled(self.model) is not None:
            row.run.stats.extras["forward"] = self.layout.ran
        self.layout.reset()

    def _emitter(self, req: Request) -> TokenCallback:
        cb = req.on_tokens
        return cb if cb is not None else (lambda _t: None)

    def _finish(self, row: Row, finished: list[Request]) -> None:
        req = row.request
        req.finished_at = time.perf_counter()
        stats = row.run.stats
        stats.new_tokens = len(row.run.tokens)
        stats.wall_time_s = req.finished_at - req.admitted_at
        stats.extras.update(self.proposer.row_extras(row))
        stats.extras["queue_time_s"] = req.admitted_at - req.submitted_at
        if row.run.matcher is not None:
            stats.extras.update(
                row.run.matcher.extras(), constraint_complete=int(row.run.constraint_complete)
            )
        if req.error is None:
            trace = row.run.trace
            req.result = GenerationResult(row.run.tokens, stats, trace.entries if trace is not None else None)
        finished.append(req)


Commit = Callable[[Row, list[int], int], bool]  # commit a row's tokens (width fed); False: the row ends


def verify_step(
    engine: Any,
    proposer: Proposer,
    rows: Sequence[Row],
    pad_id: int,
    commit: Commit,
    stats: BatchStats | None = None,
) -> list[bool]:
    """THE step, for every method and every batch size (batch 1 is a batch of one row):

    1. *propose*: every row's draft (a chain or tree under its anchor; empty: an AR step). A constrained row
       of a deterministic proposer takes the grammar's forced tokens instead when there are any
       (jump-forward), and its guesses the grammar forbids are pruned;
    2. *verify*: ONE forward of the target over every row's block ``[anchor ; guesses]`` (``engine``: the
       rows' :class:`~fastforward.core.engine.ModelEngine`, or the packed layout), constrained rows' logits
       masked by their grammar;
    3. *accept*: each row's rule (:class:`~fastforward.core.acceptance.Rule`) keeps a path and adds the
       target's token;
    4. *commit*: through ``commit`` (the row's :meth:`Run.commit`: EOS, the length cap, streaming); the
       cache keeps each row's accepted path; the proposer observes what was accepted.

    Returns, per row, whether it goes on (False: finished or cancelled; the caller retires it)."""
    t0 = time.perf_counter()
    matchers = [r.run.matcher for r in rows]
    constrained = any(m is not None for m in matchers)
    forced: list[list[int]] = [[] for _ in rows]
    if constrained and proposer.prunable:  # jump-forward: what the grammar forces is the row's draft
        for b, (row, m) in enumerate(zip(rows, matchers, strict=True)):
            forced[b] = m.jump(row.room - 1) if m is not None else []
            row.jumped = bool(forced[b])
    drafts = proposer.propose(rows)  # a row that jumped may be given anything: its forced tokens replace it
    jumped = [bool(f) for f in forced]
    if constrained and proposer.prunable:  # deterministic guesses the grammar forbids cost width only
        drafts = [
            Draft.chain(f) if f else _pruned(m, d) for f, m, d in zip(forced, matchers, drafts, strict=True)
        ]
    blocks = [
        Block([r.anchor, *d.tokens], [-1, *(p + 1 for p in d.parents)])
        for r, d in zip(rows, drafts, strict=True)
    ]
    t1 = time.perf_counter()
    fwd = engine.forward(blocks, pad_id, proposer.hidden_states)
    if constrained:
        fwd.constrain(matchers, blocks)
    logits, argmax = fwd.logits, fwd.argmax
    if stats is not None:
        stats.forwards += 1
        stats.row_steps += len(rows)
        stats.nodes_fed += fwd.fed
        stats.real_nodes += sum(len(b.tokens) for b in blocks)
    paths: list[list[int]] = []
    alive: list[bool] = []
    for b, (row, blk, d) in enumerate(zip(rows, blocks, drafts, strict=True)):
        if d.context:
            verdict = _judge_guesses(row, blk, d.context, logits[b], argmax[b], d.probs)
        else:
            verdict = row.rule.verify(
                blk.tokens, blk.parents, logits[b], row.run.config.sampling, row.generator, d.probs, argmax[b]
            )
        paths.append(verdict.path)
        if jumped[b]:
            row.run.matcher.forced_accepted += len(verdict.path) - 1
        if row.run.trace is not None:
            row.run.trace.observe(blk.tokens, blk.parents, logits[b])
        ok = commit(row, verdict.tokens(blk.tokens), len(blk.tokens))
        alive.append(ok and not row.run.done)
    engine.keep(paths)
    t2 = time.perf_counter()
    out = Verified(argmax, logits, fwd.hidden, (t1 - t0) * 1e3, fwd.ms, (t2 - t1) * 1e3, solo=len(rows) == 1)
    proposer.observe(rows, drafts, paths, out)
    share = (t1 - t0 + time.perf_counter() - t2) / len(rows)  # drafting and observing, split over rows
    for row in rows:
        row.run.stats.draft_time_s += share
    return alive


def _judge_guesses(
    row: Row, blk: Block, context: int, logits: torch.Tensor, argmax: list[int], probs: torch.Tensor | None
) -> Verdict:
    """The row's rule over its block without the ``context`` nodes after the anchor (fed for their outputs
    only); the verdict's path in the block's own node numbers."""
    sub = [0, *range(context + 1, len(blk.tokens))]
    where = {node: i for i, node in enumerate(sub)}
    tokens = [blk.tokens[i] for i in sub]
    parents = [-1, *(where[blk.parents[i]] for i in sub[1:])]
    cfg = row.run.config.sampling
    rows = logits if cfg.greedy and row.rule is EXACT else logits[torch.tensor(sub, device=logits.device)]
    guessed = probs[context:] if probs is not None else None  # [N, V]: the draft's distributions
    verdict = row.rule.verify(tokens, parents, rows, cfg, row.generator, guessed, [argmax[i] for i in sub])
    return Verdict([sub[i] for i in verdict.path], verdict.token)


def pad_token(model: torch.nn.Module) -> int:
    """What pads a shorter row's block (never seen: pad nodes are masked): the pad token, else EOS, else 0."""
    cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    eos = getattr(cfg, "eos_token_id", None)
    pad = getattr(cfg, "pad_token_id", None)
    return int(pad if pad is not None else (eos[0] if isinstance(eos, list) else eos or 0))


class ProposerDecoder(Decoder):
    """A method that is a :class:`Proposer` (plus its rule): batch 1 runs :func:`verify_step` over one row,
    the step the batched scheduler runs over many, so the method has no loop of its own and every
    configuration that decodes at batch 1 batches. Subclasses implement :meth:`proposer`."""

    def proposer(self, solo: bool) -> Proposer:
        """A fresh proposer (its per-batch state empty; what the method keeps across requests lives on the
        decoder). ``solo``: it will only ever see one row (batch 1), so a forward's time is that row's cost."""
        raise NotImplementedError

    def _generate(self, prompt_ids: torch.Tensor, run: Run) -> None:
        proposer = self.proposer(solo=True)
        proposer.check(run.config)
        engine, out = self.prefill(prompt_ids, run, proposer.hidden_states)
        sampling = run.config.sampling
        request = Request(prompt_ids[0].tolist(), run.config)
        row = Row(
            request, run, make_generator(sampling, self.device), rule=proposer.rule.start(), engine=engine
        )
        run.commit([int(select_token(out.logits[0, -1], sampling, row.generator))])
        if not run.done:
            proposer.admit(row, out)
            pad = pad_token(self.model)
            while verify_step(engine, proposer, [row], pad, _commit_solo)[0]:
                pass
        run.stats.extras.update(proposer.row_extras(row))


def _commit_solo(row: Row, tokens: list[int], width: int) -> bool:
    """Batch 1's commit: a raising callback (a cancelled request) propagates to the caller, as it always has."""
    row.run.commit(tokens, width=width)
    return True


def _pruned(matcher: Any, draft: Draft) -> Draft:
    """``draft`` without the deterministic guesses ``matcher``'s grammar forbids (and their subtrees);
    sampled drafts are kept whole (their rejection residual depends on every guess)."""
    if matcher is None or draft.probs is not None or not draft.tokens:
        return draft
    keep = matcher.prune(draft.tokens, draft.parents)
    if len(keep) == len(draft.tokens):
        return draft
    tokens, parents = subtree(draft.tokens, draft.parents, keep)
    return Draft(tokens, parents)


def batched(
    decoder: Decoder, max_batch_size: int = 8, token_budget: int = 0, layout: str = "padded"
) -> BatchDecoder:
    """The batched form of a configured decoder (same options, same proposer as its batch 1), or a one-line
    error for a decoder that is not a proposer (a peer's ``generate()``). ``layout``: how rows share a
    forward (:mod:`fastforward.core.ragged`). With ``max_batch_size`` 1 the proposer is batch 1's (timed
    schedules) and each row is prefilled as batch 1 prefills it (into a compiled forward's fixed cache when
    the model has one)."""
    proposer = proposer_for(decoder, solo=max_batch_size == 1)  # one row at a time: its times are its own
    bd = BatchDecoder(decoder.model, proposer, max_batch_size, token_budget, decoder.lossless, layout)
    if decoder.eager:  # ``ar_eager``: its rows stay off the compiled forward here too, under its own name
        bd.name = bd.stats.method = decoder.name
        if isinstance(bd.layout, ModelEngine):
            bd.layout.use_compiled = False
    return bd


def proposer_for(decoder: Decoder, solo: bool = False) -> Proposer:
    """The proposer a batch of ``decoder``'s method runs (a one-line error where there is none)."""
    return decoder.proposer(solo)

"""The one interface every decoding method implements, and the one step they all share.

A decoder turns prompt ids into new token ids and a :class:`DecodeStats`. Every method is the same loop:
*prefill* the prompt (:meth:`Decoder.prefill`, timed), then repeat *propose* (the method's drafter: a draft
model, n-gram lookup, a Jacobi iterate, a tree of head candidates), *verify* (one target forward, judged by
:mod:`fastforward.core.acceptance`) and *commit* (:meth:`Run.commit`: stop handling, stats, streaming). Only
propose and verify differ between methods; prefill and commit are written here once, so EOS and
``max_new_tokens`` end a generation exactly where greedy AR would, however many tokens a step commits.

Batch > 1 runs the same propose / verify / accept / commit step over many rows at once:
:mod:`fastforward.core.batching` (continuous batching, ragged acceptance) commits every row through this
module's :class:`Run`, so a row stops exactly where this loop would.
"""

from __future__ import annotations

import abc
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from fastforward.core.compiled import compiled
from fastforward.core.constraint import Constraint, Matcher
from fastforward.core.engine import ModelEngine
from fastforward.core.logprobs import MAX_TOP, Emitted, LogprobTrace, TokenLogprob
from fastforward.core.stats import DecodeStats
from fastforward.errors import FastForwardError

TokenCallback = Callable[[list[int]], None]
STEP_ROOM = 128  # KV slots kept free past prompt + output for one step's guesses (wider steps grow the cache)


@dataclass(frozen=True)
class SamplingConfig:
    """temperature == 0 means greedy; top_k == 0 and top_p == 1.0 disable those filters."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    @property
    def seeded(self) -> bool:
        """Sampling with a fixed seed: the same call must give the same tokens, so nothing that follows
        measured times (step gates, gamma_auto, a timed tree sizer) may shape the steps."""
        return not self.greedy and self.seed is not None

    def validate(self) -> None:
        if self.temperature < 0:
            raise FastForwardError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise FastForwardError(f"top_k must be >= 0, got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise FastForwardError(f"top_p must be in (0, 1], got {self.top_p}")


@dataclass(frozen=True)
class GenerationConfig:
    max_new_tokens: int = 128
    eos_token_ids: tuple[int, ...] = ()
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    # whose earlier requests this one may learn from: a method that keeps text across requests (suffix's
    # global trie) keeps it per scope; a server sets one per API key unless told to share
    scope: str = ""
    # what the output must match (JSON schema, regex, ...): every method then equals constrained greedy AR
    constraint: Constraint | None = None
    # log-probabilities of the committed tokens: None = not collected; n = each token's and the n likeliest
    logprobs: int | None = None

    def validate(self) -> None:
        if self.max_new_tokens < 1:
            raise FastForwardError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.logprobs is not None and not 0 <= self.logprobs <= MAX_TOP:
            raise FastForwardError(f"logprobs must be in [0, {MAX_TOP}], got {self.logprobs}")
        self.sampling.validate()


class Cancelled(Exception):  # noqa: N818 - a control-flow signal, not an error
    """A generation was stopped before it finished: the one cancellation type, raised by a token callback
    (a server's client left) at batch 1 and recorded as a batch row's error by the batched scheduler."""


class MissingInput(FastForwardError):
    """A method cannot be built with what it was given (no draft model, no trained heads).

    ``--methods all`` skips such methods; naming one explicitly still shows this one-line error."""


def require_draft(method: str, draft: object | None) -> None:
    """The one check that a method which verifies a draft model's tokens was given a draft model."""
    if draft is None:
        raise MissingInput(f"method '{method}' needs a draft model: pass --draft NAME")


@dataclass
class GenerationResult:
    tokens: list[int]  # new tokens only, EOS included when it ended the generation
    stats: DecodeStats
    logprobs: list[TokenLogprob | None] | None = None  # one per token, when GenerationConfig.logprobs asked


def apply_stops(
    committed: Sequence[int], new: Sequence[int], config: GenerationConfig
) -> tuple[list[int], bool]:
    """Cut ``new`` so that ``committed + new`` stops where AR would: after the first EOS or at the length cap.

    Returns the tokens to keep and whether generation is finished.
    """
    room = config.max_new_tokens - len(committed)
    keep: list[int] = []
    for tok in new[: max(room, 0)]:
        keep.append(int(tok))
        if tok in config.eos_token_ids:
            return keep, True
    return keep, len(committed) + len(keep) >= config.max_new_tokens


@dataclass
class Run:
    """The committed state of one generation, advanced only through :meth:`commit`.

    Every decoder's step ends here, so stop handling, the per-forward stats and streaming are the same for
    every method (and a batched or served decoder will only have to change this one place)."""

    config: GenerationConfig
    stats: DecodeStats
    emit: TokenCallback
    tokens: list[int] = field(default_factory=list)  # new tokens committed so far
    done: bool = False
    engine: ModelEngine | None = None  # the target's engine once prefilled (closed when the request ends)
    matcher: Matcher | None = None  # the constraint's grammar state, advanced by commit (None: unconstrained)
    constraint_complete: bool = False  # the generation ended because the grammar allows nothing more
    trace: LogprobTrace | None = None  # where committed tokens were scored (GenerationConfig.logprobs)

    def __post_init__(self) -> None:
        if self.config.constraint is not None and self.matcher is None:
            self.matcher = self.config.constraint.matcher()
        if self.config.logprobs is not None and self.trace is None:
            self.trace = LogprobTrace(self.config.logprobs)

    def commit(self, new: Sequence[int], counted: bool = True, width: int = 1) -> list[int]:
        """Commit the tokens one target forward produced (cut at EOS / the length cap) and count the forward.

        ``width`` is how many tokens that forward fed (1: a plain AR step), so every record says how many
        steps were really parallel. ``counted=False`` commits tokens whose forwards are unknown (a peer's
        ``generate()`` with assistance).
        ``tokens`` is extended in place, so a decoder may keep a reference to it. Returns the tokens kept;
        ``done`` says whether the generation is over."""
        keep, self.done = apply_stops(self.tokens, new, self.config)
        if self.matcher is not None:  # the grammar follows every committed token; complete ends the output
            keep = keep[: self.matcher.advance(keep)]
            if self.matcher.complete:
                self.done = self.constraint_complete = True
        self.tokens += keep
        if counted:
            self.stats.record_step(len(keep), width)
        emitted = Emitted(keep)
        if self.trace is not None:  # the entries travel with the ids (a server streams them per chunk)
            emitted.logprobs = self.trace.take(keep)
        self.emit(emitted)
        return keep


class Decoder(abc.ABC):
    """Base class: subclasses implement :meth:`_generate`; this wrapper validates, times and counts.

    Three facts about a configured decoder live on the instance (class defaults, overridden in ``__init__``
    when the configuration changes them) and nowhere else; the bench and the CLI read them from here:
    ``lossless`` (tokens identical to greedy AR, or the same distribution when sampling), ``needs_draft`` (it
    verifies a separate draft model's tokens) and ``in_all`` (part of ``--methods all``).
    """

    name: str = "decoder"
    lossless: bool = True
    needs_draft: bool = False
    in_all: bool = True
    # True: this decoder's forwards never use the model's compiled forward (the eager reference row
    # ``ar_eager`` of a ``--compile on`` run, timed beside the compiled one on the same weights)
    eager: bool = False
    # why this method cannot decode under a constraint (structured output); None: it can, every forward of
    # the target goes through the engine, which masks the logits
    unconstrained_why: str | None = None

    def check_constraint(self, config: GenerationConfig) -> None:
        """A one-line error when a constraint or log-probabilities are asked of a method whose forwards do
        not go through the engine."""
        if self.unconstrained_why is None:
            return
        if config.constraint is not None:
            raise FastForwardError(
                f"method '{self.name}' cannot decode under a constraint: {self.unconstrained_why}"
            )
        if config.logprobs is not None:
            raise FastForwardError(f"method '{self.name}' cannot return logprobs: {self.unconstrained_why}")

    def __init__(self, model: torch.nn.Module, context_length: int | None = None) -> None:
        self.model = model
        self.context_length = context_length or model_context_length(model)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def generate(
        self,
        prompt_ids: Sequence[int] | torch.Tensor,
        config: GenerationConfig,
        on_tokens: TokenCallback | None = None,
    ) -> GenerationResult:
        config.validate()
        self.check_constraint(config)
        ids = _as_id_tensor(prompt_ids, self.device)  # [1, T]
        if ids.shape[1] == 0:
            raise FastForwardError("the prompt is empty")
        if ids.shape[1] + config.max_new_tokens > self.context_length:
            raise FastForwardError(
                f"prompt ({ids.shape[1]} tokens) + max_new_tokens ({config.max_new_tokens}) exceeds the "
                f"model's context length ({self.context_length})"
            )
        stats = DecodeStats(method=self.name, prompt_tokens=ids.shape[1])
        run = Run(config, stats, on_tokens or (lambda _t: None))
        start = time.perf_counter()
        try:
            with torch.inference_mode():
                self._generate(ids, run)
        finally:
            if run.engine is not None:  # gives a compiled forward's cache back for the next request
                if compiled(self.model) is not None:  # say what ran: compiled graphs, or eager and why
                    stats.extras["forward"] = run.engine.ran
                run.engine.close()
        stats.wall_time_s = time.perf_counter() - start
        if run.matcher is not None:
            stats.extras.update(run.matcher.extras(), constraint_complete=int(run.constraint_complete))
        stats.new_tokens = len(run.tokens)
        return GenerationResult(run.tokens, stats, run.trace.entries if run.trace is not None else None)

    def prefill(self, prompt_ids: torch.Tensor, run: Run, hidden: bool = False) -> tuple[ModelEngine, Any]:
        """The opening every method shares: a fresh engine (:mod:`fastforward.core.engine`) whose one row is
        the prompt, prefilled in one timed forward, and that forward's output.

        Only the last position's logits are computed (the first new token); ``hidden`` adds its hidden
        states. One engine per request, local to ``_generate`` as the KV cache always was, so concurrent
        requests on one decoder never share rows. Counts as a target forward when the caller commits its
        token."""
        engine = ModelEngine(self.model, use_compiled=not self.eager)
        # room for the prompt, the whole output and one wide step: the cache is never copied to grow
        capacity = prompt_ids.shape[1] + run.config.max_new_tokens
        with Timer(run.stats, "prefill_time_s"):
            out = engine.start(prompt_ids, hidden, capacity, room=STEP_ROOM)
        if run.matcher is not None:  # the first token and every later forward: the grammar's mask applies
            run.matcher.mask_row(out.logits[0, -1])
        if run.trace is not None:  # the first token was scored by the prefill, the later ones by forwards
            run.trace.observe([-1], [-1], out.logits[0, -1:])
        run.engine = engine
        return engine, out

    def proposer(self, solo: bool) -> Any:
        """The method's :class:`~fastforward.core.batching.Proposer` (what a batch of its rows runs; ``solo``:
        a batch of one row, whose forwards' times are that row's costs). Every method of ours is one
        (:class:`~fastforward.core.batching.ProposerDecoder`); a peer's ``generate()`` is not."""
        raise FastForwardError(f"method '{self.name}' has no batched path; run it with batch size 1")

    def reopen_estimates(self) -> None:
        """Forget the timing estimates kept across requests (step gate, gamma_auto), so that a bench's
        warm-up does not decide the measured run; methods without any have nothing to forget."""
        return None

    @abc.abstractmethod
    def _generate(self, prompt_ids: torch.Tensor, run: Run) -> None:
        """Decode after ``prompt_ids`` ([1, T]), committing every step's tokens through ``run.commit``."""


def _as_id_tensor(prompt_ids: Sequence[int] | torch.Tensor, device: torch.device) -> torch.Tensor:
    ids = (
        prompt_ids
        if isinstance(prompt_ids, torch.Tensor)
        else torch.tensor(list(prompt_ids), dtype=torch.long)
    )
    if ids.dim() == 1:
        ids = ids.unsqueeze(0)
    if ids.dim() != 2 or ids.shape[0] != 1:
        raise FastForwardError(f"expected one prompt of shape [T] or [1, T], got {tuple(ids.shape)}")
    return ids.to(device)


def model_context_length(model: torch.nn.Module) -> int:
    cfg = getattr(model, "config", None)
    cfg = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    return int(getattr(cfg, "max_position_embeddings", 0) or 1 << 30)


class Timer:
    """Accumulate elapsed seconds into a stats field: ``with Timer(stats, "draft_time_s"): ...``."""

    def __init__(self, stats: DecodeStats, attr: str) -> None:
        self.stats, self.attr = stats, attr

    def __enter__(self) -> Timer:
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        setattr(self.stats, self.attr, getattr(self.stats, self.attr) + time.perf_counter() - self.t0)

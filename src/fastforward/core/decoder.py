"""The one interface every decoding method implements.

A decoder turns prompt ids into new token ids and a :class:`DecodeStats`. All methods share stop handling
(:func:`apply_stops`) so that EOS and ``max_new_tokens`` end a generation exactly where greedy AR would,
however many tokens a method commits per step.

Batch > 1 is on the roadmap: ``generate`` takes one prompt today; a batched ``generate_batch`` will take
per-row lengths and per-row rollback (see :mod:`fastforward.core.cache`) without changing this signature.
"""

from __future__ import annotations

import abc
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from fastforward.core.stats import DecodeStats
from fastforward.errors import FastForwardError

TokenCallback = Callable[[list[int]], None]


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

    def validate(self) -> None:
        if self.max_new_tokens < 1:
            raise FastForwardError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        self.sampling.validate()


@dataclass
class GenerationResult:
    tokens: list[int]  # new tokens only, EOS included when it ended the generation
    stats: DecodeStats


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


class Decoder(abc.ABC):
    """Base class: subclasses implement :meth:`_generate`; this wrapper validates, times and counts."""

    name: str = "decoder"
    lossless: bool = True  # tokens identical to greedy AR (greedy) or same distribution (sampling)

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
        ids = _as_id_tensor(prompt_ids, self.device)  # [1, T]
        if ids.shape[1] == 0:
            raise FastForwardError("the prompt is empty")
        if ids.shape[1] + config.max_new_tokens > self.context_length:
            raise FastForwardError(
                f"prompt ({ids.shape[1]} tokens) + max_new_tokens ({config.max_new_tokens}) exceeds the "
                f"model's context length ({self.context_length})"
            )
        stats = DecodeStats(method=self.name, prompt_tokens=ids.shape[1])
        start = time.perf_counter()
        with torch.inference_mode():
            tokens = self._generate(ids, config, stats, on_tokens or (lambda _t: None))
        stats.wall_time_s = time.perf_counter() - start
        stats.new_tokens = len(tokens)
        return GenerationResult(tokens=tokens, stats=stats)

    @abc.abstractmethod
    def _generate(
        self, prompt_ids: torch.Tensor, config: GenerationConfig, stats: DecodeStats, emit: TokenCallback
    ) -> list[int]:
        """Decode after ``prompt_ids`` ([1, T]); call ``emit`` with each batch of committed tokens."""


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

"""One stats record for every method, so the benchmark can compare them without knowing which is which.

Convention (Spec-Bench): a *target forward* is any forward pass of the target model, the prefill included;
the prefill yields the first new token. Plain AR therefore has ``mean_accepted_tokens == 1.00`` and every
count of accepted tokens includes the token the target always contributes (correction or bonus).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class DecodeStats:
    method: str
    prompt_tokens: int = 0
    new_tokens: int = 0
    target_forwards: int = 0
    accepted_per_step: list[int] = field(default_factory=list)  # tokens committed by each target forward
    wall_time_s: float = 0.0
    prefill_time_s: float = 0.0
    draft_time_s: float = 0.0  # time spent proposing (draft model, heads, pools); 0 for AR
    extras: dict[str, Any] = field(default_factory=dict)  # method-specific counters
    # decode forwards (prefill excluded) by how many tokens they fed: width_hist[w] forwards fed w tokens,
    # the last committed one included, so width_hist[1] counts plain AR steps (a step gate's fallback,
    # gamma_auto's draft length 0, a draft that found nothing) and the rest are parallel steps
    width_hist: list[int] = field(default_factory=list)

    def record_step(self, committed: int, width: int = 1) -> None:
        """Count one target forward that committed ``committed`` new tokens after feeding ``width`` tokens.

        The first counted forward of a generation is its prefill, whose width is the prompt's, not a step's:
        it is left out of ``width_hist``."""
        if self.target_forwards > 0:
            add_to_hist(self.width_hist, max(width, 1))
        self.target_forwards += 1
        self.accepted_per_step.append(committed)

    @property
    def ar_steps(self) -> int:
        return ar_steps(self.width_hist)

    @property
    def parallel_steps(self) -> int:
        return sum(self.width_hist) - self.ar_steps

    @property
    def drafted_tokens(self) -> int:
        return drafted_tokens(self.width_hist)

    @property
    def ar_step_share(self) -> float | None:
        return ar_step_share(self.width_hist)

    @property
    def mean_accepted_tokens(self) -> float:
        return self.new_tokens / self.target_forwards if self.target_forwards else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.wall_time_s if self.wall_time_s > 0 else 0.0

    def summary(self) -> str:
        share = self.ar_step_share
        ar = f", {self.ar_steps} of {sum(self.width_hist)} steps plain AR" if share else ""
        return (
            f"[{self.method}] {self.new_tokens} tokens in {self.wall_time_s:.2f}s "
            f"({self.tokens_per_s:.1f} tok/s), {self.target_forwards} target forwards, "
            f"{self.mean_accepted_tokens:.2f} accepted tokens/forward{ar}"
        )

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["mean_accepted_tokens"] = self.mean_accepted_tokens
        d["tokens_per_s"] = self.tokens_per_s
        d["ar_steps"], d["parallel_steps"] = self.ar_steps, self.parallel_steps
        d["drafted_tokens"], d["ar_step_share"] = self.drafted_tokens, self.ar_step_share
        return d


# ---- what ran, from a width histogram (shared by DecodeStats and the totals in core.metrics)


def add_to_hist(hist: list[int], width: int, n: int = 1) -> None:
    """``hist[width] += n``, growing the list as needed."""
    if len(hist) <= width:
        hist.extend([0] * (width + 1 - len(hist)))
    hist[width] += n


def ar_steps(hist: list[int]) -> int:
    """Decode forwards that fed the last token alone (plain AR steps)."""
    return hist[1] if len(hist) > 1 else 0


def drafted_tokens(hist: list[int]) -> int:
    """Guessed tokens fed to the target (each forward's width minus the committed token it always feeds)."""
    return sum((w - 1) * n for w, n in enumerate(hist) if w > 1)


def ar_step_share(hist: list[int]) -> float | None:
    """Share of decode forwards that were plain AR steps; None when there was no decode forward."""
    total = sum(hist)
    return ar_steps(hist) / total if total else None


def mean_width(hist: list[int]) -> float | None:
    """Mean tokens fed per decode forward; None when there was no decode forward."""
    total = sum(hist)
    return sum(w * n for w, n in enumerate(hist)) / total if total else None

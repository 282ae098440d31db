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

    def record_step(self, committed: int) -> None:
        """Count one target forward that committed ``committed`` new tokens."""
        self.target_forwards += 1
        self.accepted_per_step.append(committed)

    @property
    def mean_accepted_tokens(self) -> float:
        return self.new_tokens / self.target_forwards if self.target_forwards else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.wall_time_s if self.wall_time_s > 0 else 0.0

    def summary(self) -> str:
        return (
            f"[{self.method}] {self.new_tokens} tokens in {self.wall_time_s:.2f}s "
            f"({self.tokens_per_s:.1f} tok/s), {self.target_forwards} target forwards, "
            f"{self.mean_accepted_tokens:.2f} accepted tokens/forward"
        )

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["mean_accepted_tokens"] = self.mean_accepted_tokens
        d["tokens_per_s"] = self.tokens_per_s
        return d

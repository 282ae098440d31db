"""Run a method's parallel step only while it beats a plain AR step on this machine and text.

A parallel step (a Jacobi block, a lookahead window) feeds many tokens to commit a few; whether that pays is
``tokens per step / ms per step`` against ``1 / ms per AR step``, and both sides differ by machine (a
16-token forward costs ~1.1x one token on a CPU with bf16 instructions, 3-16x on an AVX2-only one in bf16)
and by text (Jacobi commits ~1.05 tokens per step on chat, more on code). So the step is not fixed in
advance: :class:`StepGate` times both kinds of step as they run and chooses the one that has given
more tokens per ms. An AR step feeds only the last committed token, so it costs what AR costs; while AR
wins, the parallel step is probed again (a burst of steps, since a method's steps build on each other) after
a back-off that doubles with every losing probe (a cost ratio that the text could overcome is found again;
one that nothing overcomes costs ~1/64 of the time).

A decoder keeps one gate across its requests (:meth:`StepGate.begin`), so only its first request pays the
opening measurements and a server or bench settles once. Any schedule of parallel and AR steps commits the
same greedy tokens (each step commits the target's own argmax chain), so the gate never changes greedy
output, only speed. With a seeded sampler the step schedule would follow measured times and the seed would
not reproduce, so the decoders keep the gate off there (``SamplingConfig.seeded``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


def follows_times(solo: bool, sampling: Any) -> bool:
    """The one rule of every width policy (the step gate, gamma_auto, a timed tree sizer): a row's step widths
    may follow measured times only when the row decodes alone (``solo``: batch 1; a batch forward's time is
    shared by its rows, so no row's is its own, and a policy then reads the machine's cached cost curve or
    keeps its fixed schedule) and is not seeded (a seed must give the same tokens on any machine and load).
    What a policy learns of the machine's costs persists across its decoder's requests; what it learns of the
    text is the request's (the gate and gamma_auto keep both on the decoder, ``begin()`` marks a request)."""
    return solo and not sampling.seeded


def parallel_pays(tokens_per_step: float, parallel_ms: float, ar_ms: float) -> bool:
    """Whether ``tokens_per_step`` tokens in ``parallel_ms`` beat one token in ``ar_ms`` (ties go to the
    parallel step: it also refreshes the method's guesses)."""
    return tokens_per_step * ar_ms >= parallel_ms


@dataclass
class Ema:
    """An exponential average whose first sample is provisional: the first step of a kind can pay one-time
    costs (kernel primitives for a new shape), so the second sample replaces it rather than averaging."""

    decay: float = 0.8
    value: float | None = None
    count: int = 0

    def set(self, x: float) -> None:
        """Replace the estimate by a fresh measurement that stands for many samples (a burst's mean)."""
        self.value, self.count = x, max(self.count, 2)

    def demote(self) -> None:
        """Make the next sample provisional again (it replaces the value and is replaced by the one after):
        a step that pays a one-time cost is coming, e.g. a draft catching up on the tokens committed while
        it was off, or the first step of a request."""
        self.count = 0

    def add(self, x: float) -> None:
        self.count += 1
        if self.count <= 2:
            self.value = x
        else:
            assert self.value is not None
            self.value = self.decay * self.value + (1 - self.decay) * x


GATES = ("auto", "off")  # the ``gate`` option of the methods that run a StepGate
GATE_HELP = (
    "auto: time the method's steps against plain AR steps (estimates kept across the decoder's requests) and "
    "take AR steps while they give more tokens per second (probed again after a back-off; greedy output "
    "unchanged; off with a seed); off: every step is the method's own"
)


@dataclass
class StepGate:
    """Chooses each step: the method's parallel step (True) or a plain AR step (False).

    A method's parallel steps build on each other (a lookahead window needs N-1 steps before it yields
    n-grams, a Jacobi guess one step to refresh), so the parallel step is judged on *bursts* of ``burst``
    consecutive steps, never on one. Opening: a burst, then an AR step; afterwards whichever has given more
    tokens per ms (tokens per parallel step: the burst's mean, then a slow running average while the method
    runs). While AR wins, a burst probes again after ``backoff * burst * cost ratio`` AR steps, so probing
    costs at most ~1/backoff of the time however expensive the wide forward is; a burst that still loses
    doubles the back-off (up to ``max_backoff``), one that wins resets it. ``enabled=False`` always answers
    True (the method as configured)."""

    enabled: bool = True
    burst: int = 4  # consecutive parallel steps per judgement (the opening and every probe)
    min_backoff: int = 8
    max_backoff: int = 64
    tokens: Ema = field(default_factory=lambda: Ema(decay=0.9))  # tokens committed per parallel step
    parallel_ms: Ema = field(default_factory=Ema)
    ar_ms: Ema = field(default_factory=Ema)
    backoff: int = 0  # probe spacing while AR wins (times burst and cost ratio, in AR steps)
    wait: int = 0  # AR steps since the last parallel step
    ar_steps: int = 0
    probes: int = 0
    _left: int = 0  # parallel steps left in the current burst
    _sum: int = 0  # tokens the current burst committed so far
    _at_begin: tuple[int, int] = (0, 0)

    def __post_init__(self) -> None:
        self.backoff = self.min_backoff
        self._left = self.burst  # the opening burst

    def reopen(self) -> None:
        """Forget every estimate and open with a burst again, as a new gate would (the estimates of a
        warm-up run must not decide the measured one)."""
        fresh = StepGate(self.enabled, self.burst, self.min_backoff, self.max_backoff)
        self.__dict__.update(fresh.__dict__)

    def begin(self) -> StepGate:
        """Start a request. The estimates and the back-off carry over from earlier requests (a decoder
        keeps one gate: step costs are the machine's, and a workload's text changes less between its
        requests than the opening would cost to relearn); :meth:`extras` counts from here."""
        self._at_begin = (self.ar_steps, self.probes)
        return self

    def winning(self) -> bool:
        """Whether the parallel step has given at least as many tokens per ms as the AR step so far."""
        if self.tokens.value is None or self.parallel_ms.value is None or self.ar_ms.value is None:
            return True
        return parallel_pays(self.tokens.value, self.parallel_ms.value, self.ar_ms.value)

    def parallel(self) -> bool:
        """The kind of the next step."""
        if not self.enabled or self._left > 0:
            return True
        if self.ar_ms.value is None or self.parallel_ms.value is None:
            return False  # the opening AR step
        if self.winning():
            return True
        ratio = max(1.0, self.parallel_ms.value / self.ar_ms.value)
        if self.wait >= self.backoff * self.burst * ratio:
            self._left, self._sum = self.burst, 0  # a probe
            self.probes += 1
            return True
        return False

    def observe(self, parallel: bool, tokens: int, ms: float) -> None:
        """Record a step: its kind, the tokens it committed and its wall time."""
        if not self.enabled:
            return
        if not parallel:
            self.ar_ms.add(ms)
            self.ar_steps += 1
            self.wait += 1
            return
        self.parallel_ms.add(ms)
        self.wait = 0  # AR steps are counted from the last parallel one
        if self._left <= 0:  # the method is running: a slow running average
            self.tokens.add(tokens)
            return
        self._sum += tokens
        self._left -= 1
        if self._left == 0:  # a burst ends: its mean replaces the estimate (the text has moved on)
            self.tokens.set(self._sum / self.burst)
            self._sum = 0
            if self.probes:  # a probe's burst (the opening burst sets no back-off)
                won = self.winning()
                self.backoff = self.min_backoff if won else min(2 * self.backoff, self.max_backoff)

    def extras(self) -> dict[str, int]:
        """Counters for the run's stats: AR steps taken instead of the parallel step, probes after losing."""
        return {
            "gate_ar_steps": self.ar_steps - self._at_begin[0],
            "gate_probes": self.probes - self._at_begin[1],
        }

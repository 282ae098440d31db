"""Width policies: how wide each row's next step is, chosen from what earlier steps cost and yielded.

Every method's step verifies some guesses after the row's last token; how many pays depends on the machine
(a 16-token forward costs ~1.1x one token on a CPU with bf16 instructions, 3-16x on an AVX2-only one in
bf16) and on the text (Jacobi commits ~1.05 tokens per step on chat, more on code). So a method that can
vary its width asks a :class:`WidthPolicy`: ``choose`` this step's width for this row, ``observe`` what the
step cost and yielded (:class:`StepCost`). Three implement it:

- :class:`StepGate` (Jacobi, lookahead ``gate=auto``): the method's parallel step or a plain AR step;
- :class:`CostTracker` (speculative ``gamma_auto``): the draft length, 0 for a plain AR step;
- :class:`~fastforward.chimera.tree.TreeSizer` (Chimera and Token Recycling ``tree=auto``): the tree.

One rule says when a policy may follow measured times (:func:`follows_times`: the row decodes alone and
is not seeded) and one where it lives (:func:`row_policy`): a timed policy is the decoder's and carries what
it learnt across requests (``begin()`` marks each); any other is the row's own, fresh per request, and
reads only the machine's cached cost curve or its fixed schedule, so a seed reproduces on any machine
and load. Whatever a policy chooses, a lossless method commits the same tokens: a policy changes speed only.

:class:`StepGate` in more detail: a parallel step (a Jacobi block, a lookahead window) feeds many tokens to
commit a few; whether that pays is ``tokens per step / ms per step`` against ``1 / ms per AR step``. The gate
times both kinds of step as they run and chooses the one that has given more tokens per ms. An AR step feeds
only the last committed token, so it costs what AR costs; while AR wins, the parallel step is probed again
(a burst of steps, since a method's steps build on each other) after a back-off that doubles with every
losing probe (a cost ratio that the text could overcome is found again; one that nothing overcomes costs
~1/256 of the time).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

C = TypeVar("C", covariant=True)
P = TypeVar("P", bound="WidthPolicy")


@dataclass(frozen=True)
class StepCost:
    """One row's step as a width policy sees it: what it verified, what it committed and what it cost."""

    guesses: int  # guesses the verify forward judged (0: a plain AR step, the last token alone)
    accepted: int  # of them accepted: the step committed accepted + 1 tokens
    propose_ms: float = 0.0  # proposing them (a draft model, draft heads, a lookup)
    verify_ms: float = 0.0  # the verify forward
    observe_ms: float = 0.0  # the proposer's bookkeeping after the step (a draft head's state update)
    width: int = 0  # tokens the forward fed, root included (0: guesses + 1; a Jacobi window feeds more)
    tokens: Sequence[int] = ()  # the committed tokens, for a policy that learns which candidate was right
    candidates: Sequence[Sequence[int]] = ()  # per depth, the proposer's ranked candidates this step

    @property
    def fed(self) -> int:
        return self.width or self.guesses + 1


class WidthPolicy(Protocol[C]):
    """Choose this step's width for a row; observe what it cost and yielded.

    ``choose(limit)`` returns the policy's kind of width, never wider than ``limit`` guesses: a count (0: a
    plain AR step) for a chain or a block, a tree for a tree. ``timed``: the policy reads measured times
    (see :func:`follows_times`); otherwise only counts and the machine's cached cost curve."""

    timed: bool

    def begin(self) -> WidthPolicy[C]:
        """A request starts: what was learnt carries over, per-request counters restart."""
        ...

    def reopen(self) -> None:
        """Forget every estimate (a bench's warm-up must not decide the measured run)."""
        ...

    def choose(self, limit: int) -> C: ...

    def observe(self, step: StepCost) -> None: ...

    def extras(self) -> dict[str, int]:
        """This request's counters for the run's stats."""
        ...


def follows_times(solo: bool, sampling: Any) -> bool:
    """The one rule of every width policy (the step gate, gamma_auto, a timed tree sizer): a row's step widths
    may follow measured times only when the row decodes alone (``solo``: batch 1; a batch forward's time is
    shared by its rows, so no row's is its own, and a policy then reads the machine's cached cost curve or
    keeps its fixed schedule) and is not seeded (a seed must give the same tokens on any machine and load).
    What a policy learns of the machine's costs persists across its decoder's requests; what it learns of the
    text is the request's (the gate and gamma_auto keep both on the decoder, ``begin()`` marks a request)."""
    return solo and not sampling.seeded


def row_policy(solo: bool, sampling: Any, shared: P | None, fresh: Callable[[], P]) -> P:
    """The policy a row uses: the decoder's ``shared`` one (``begin()``-ed, so its estimates carry over
    from earlier requests) when the row's widths may follow measured times, else ``fresh()``, the row's
    own for this request (untimed)."""
    if shared is not None and follows_times(solo, sampling):
        return shared.begin()  # type: ignore[return-value]
    return fresh()


def parallel_pays(tokens_per_step: float, parallel_ms: float, ar_ms: float) -> bool:
    """Whether ``tokens_per_step`` tokens in ``parallel_ms`` beat one token in ``ar_ms`` (ties go to the
    parallel step: it also refreshes the method's guesses)."""
    return tokens_per_step * ar_ms >= parallel_ms


def probe_wait(lost_ms: float, ar_ms: float, budget: float, floor: float, ceiling: float) -> float:
    """AR steps to take before probing a losing method again: enough that the last probe's loss
    (``lost_ms``: its time beyond what AR steps at ``ar_ms`` would have taken for its tokens) is at most
    ``budget`` of the time those AR steps take, never fewer than ``floor`` (the doubling back-off) nor
    more than ``ceiling`` (the longest back-off, so a text that starts paying is still found).

    Why a budget: a back-off counted in steps loses more where a wide step costs more for little gain. On the
    AMX Xeon in fp32 a Jacobi block costs ~3x an AR step for ~1.1 tokens, and its opening burst and the
    first two probes (after 8 and 16 back-offs) cost 4-6% of a 384-token run (jacobi 0.94-0.96x of AR,
    sessions 33-36); sized by its loss, the first probe waits ~450 AR steps there.

    Why the gate's budget is 0.5% (2% before session 48): on the AMD EPYC in bf16 a Jacobi block of 16
    costs ~2.3 AR steps on the machine's cost curve (2.6-3.1 as timed in a run, results/compiled_s48/gate.txt)
    for ~1 token. At 2% the opening and the probes of a 1000-token bench took 10-16 of its ~1020 steps, and
    the turns with a probe ran 5-10% slower than AR's (a burst's loss, and the next AR steps after another
    width's graph). The cost, on every machine: a step costing 2.3 AR steps now opens after 589 AR steps
    (the ceiling, the longest back-off) instead of 260, so a text that pays is found later, within
    ``max_backoff`` back-offs still."""
    return max(floor, min(ceiling, lost_ms / (budget * ar_ms)))


def opening_wait(ratio: float, burst: int, budget: float, ceiling: float) -> float:
    """AR steps before a gate's first burst when the machine's cost curve says what a parallel step costs
    (``ratio``: its width's cost over one token's) and nothing is known of the text yet: the wait a probe
    would take after a burst that committed one token a step (the least any step commits), so the opening
    too costs at most ``budget`` of the AR time before it (:func:`probe_wait`, no floor). 0 where a wide
    step costs no more than an AR step: the burst opens at once.

    Why: the opening burst was the one burst no budget bounded. Lookahead's 25-token step costs ~3 AR steps
    in fp32 on an AMX Xeon (the compiled 32-token bucket) for ~1 token, so its opening and the first probe
    cost 4-6% of a 700-token MT-bench run (0.94x of AR, session 38); where a wide step costs ~1.05x
    (a GPU, bf16 on AMX) the wait is a few steps."""
    return probe_wait(burst * max(0.0, ratio - 1.0), 1.0, budget, 0.0, ceiling)


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
    consecutive steps, never on one. AR is judged on *stretches* of ``burst`` AR steps too, without their
    first step: every switch from parallel steps to AR steps starts one. Opening: a burst, then an AR
    stretch; afterwards whichever has given more tokens per ms (tokens per parallel step: the burst's mean,
    then a slow running average while the method runs). While
    AR wins, a burst probes again after ``backoff * burst * cost ratio`` AR steps, so probing costs at most
    ~1/backoff of the time however expensive the wide forward is; a burst that still loses doubles the
    back-off (up to ``max_backoff``), one that wins resets it; and never sooner than the last burst's loss
    allows within a ``budget`` share of the AR steps' time (:func:`probe_wait`), nor later than ``max_backoff``
    back-offs. While the method wins, an AR stretch measures
    AR again after ``refresh`` parallel steps in a row, an interval that doubles (up to ``max_refresh``)
    each time the method still wins after it, so a method that pays loses little of its gain to it.
    ``ratio`` (the parallel step's cost over an AR step's, read from the machine's cost curve; 0: not known)
    defers the opening burst by :func:`opening_wait` AR steps, so a step that costs several AR steps opens
    only after enough AR time that its burst's likely loss fits the same ``budget`` (at most
    ``opening_backoff`` back-offs: nothing is known of the text yet, so it waits less than a probe may).

    Why the longest probe back-off is 256 back-offs (64 before session 58): with 64 the ceiling, not the
    budget, spaced the probes wherever a block loses by much. SmolLM2 in float32 on the Ice Lake Xeon with
    AVX-512: a Jacobi block of 16 costs ~1.8 AR steps for ~1.05 tokens, so the budget asks ~600 AR steps
    between bursts and the ceiling allowed ~450; a burst's first step also runs cold (75-125 ms against
    50-60), and in AR and jacobi alternated the bursts took 0.9% of jacobi's time (results/compiled_s58/
    gate_steps.txt), over the 0.5% budget. With 256 the budget spaces them, and a block that keeps losing
    backs off further (8, 16, ... 256 back-offs). The cost: a text that starts paying after a long losing
    stretch is found within 256 back-offs (~1800 AR steps at 1.8 AR steps a block) instead of 64. The
    opening keeps 64: a method that pays from its first burst (a CLLM-trained model) must not wait longer.

    Why stretches: the first AR steps after wide ones do not cost what AR steps cost (session 33, an AMX
    Xeon in fp32: the first 54-133 ms and the second up to 39 ms, against 29-33 ms in a run of AR steps,
    the graphs of another width bucket having run just before). With one AR step as AR's cost, Jacobi and
    lookahead never measured AR again and ran at 0.50-0.78x of AR for whole runs; with the second of two, a
    block at 1.2-2.5 tokens per step still looked as if it paid when it did not. ``enabled=False`` always
    answers True (the method as configured)."""

    enabled: bool = True
    burst: int = 4  # consecutive parallel steps per judgement (the opening and every probe)
    min_backoff: int = 8
    max_backoff: int = 256
    opening_backoff: int = 64  # the opening's longest wait, in back-offs (see the docstring)
    refresh: int = 64  # while the method wins, an AR stretch after this many parallel steps in a row
    max_refresh: int = 1024
    budget: float = 0.005  # a losing burst's share of the AR time until the next probe (probe_wait)
    ratio: float = 0.0  # the parallel step's cost in AR steps from the cost curve (0: unknown; opens at once)
    tokens: Ema = field(default_factory=lambda: Ema(decay=0.9))  # tokens committed per parallel step
    parallel_ms: Ema = field(default_factory=Ema)
    ar_ms: Ema = field(default_factory=Ema)
    backoff: int = 0  # probe spacing while AR wins (times burst and cost ratio, in AR steps)
    wait: int = 0  # AR steps since the last parallel step
    run: int = 0  # parallel steps since the last AR step
    ar_steps: int = 0
    probes: int = 0
    _left: int = 0  # parallel steps left in the current burst
    _ar_left: int = 0  # AR steps left in the current AR stretch
    _ar_first: float = 0.0  # the current stretch's first step time (used only for a 1-step stretch)
    _ar_sum: float = 0.0  # and the sum of its later ones
    _seen_ratio: float = 0.0  # ms per parallel step over ms per AR step, timed side by side (0: not yet)
    _every: int = 0  # the current refresh interval
    _sum: int = 0  # tokens the current burst committed so far
    _at_begin: tuple[int, int] = (0, 0)
    _chosen: bool = True  # the kind of the step choose() gave last (observe() records that kind)

    def __post_init__(self) -> None:
        self.backoff = self.min_backoff
        self._left = 0 if self.opening() > 0 else self.burst  # the opening burst, now or deferred
        self._every = self.refresh

    def opening(self) -> float:
        """AR steps to take before the opening burst (:func:`opening_wait`; 0 without a ``ratio``)."""
        if not self.ratio:
            return 0.0
        return opening_wait(
            self.ratio, self.burst, self.budget, self.opening_backoff * self.burst * self.ratio
        )

    @property
    def timed(self) -> bool:
        return self.enabled

    def reopen(self) -> None:
        """Forget every estimate and open with a burst again, as a new gate would (the estimates of a
        warm-up run must not decide the measured one)."""
        fresh = StepGate(
            self.enabled,
            self.burst,
            self.min_backoff,
            self.max_backoff,
            self.opening_backoff,
            self.refresh,
            self.max_refresh,
            self.budget,
            self.ratio,
        )
        self.__dict__.update(fresh.__dict__)

    def begin(self) -> StepGate:
        """Start a request. The estimates and the back-off carry over from earlier requests (a decoder
        keeps one gate: step costs are the machine's, and a workload's text changes less between its
        requests than the opening would cost to relearn); :meth:`extras` counts from here."""
        self._at_begin = (self.ar_steps, self.probes)
        return self

    def winning(self) -> bool:
        """Whether the parallel step has given at least as many tokens per ms as the AR step so far.

        While AR steps run, the parallel step's time is the last burst's and the AR step's is a running
        average, so the two are compared as the cost ratio they had when timed side by side
        (:meth:`cost_ratio`), not as times taken hundreds of steps apart. Why (session 58, Ice Lake Xeon,
        SmolLM2 float32 bench): the first AR steps of a request run cold after the other methods'
        generations (and the host's speed drifts). One bench turn ran 61 parallel steps at 1.26 tokens a
        step where a block costs ~1.8 AR steps (1.33x AR's time): only an AR estimate near 44 ms (~31 ms
        true) lets such a block pass, until the next AR refresh. In simulation (tests/test_pacing.py) such
        cold starts cost a block at 1.5 tokens a step 0.9-1.2% of the time against the budget's 0.5%;
        compared side by side, 0.1-0.3%."""
        if self.tokens.value is None or self.parallel_ms.value is None or self.ar_ms.value is None:
            return True
        return parallel_pays(self.tokens.value, self.cost_ratio(), 1.0)

    def cost_ratio(self) -> float:
        """A parallel step's cost in AR steps: while the method runs (its steps fresh, AR's from the stretch
        before), their current estimates; while AR runs, the ratio they had when last timed side by side
        (a burst and the AR stretch right after it, or a refresh)."""
        assert self.parallel_ms.value is not None and self.ar_ms.value is not None
        if self.run == 0 and self._seen_ratio:
            return self._seen_ratio
        return self.parallel_ms.value / self.ar_ms.value

    def choose(self, limit: int) -> int:
        """``limit`` (the method's parallel step) or 0 (a plain AR step)."""
        self._chosen = self.parallel()
        return limit if self._chosen else 0

    def parallel(self) -> bool:
        """The kind of the next step (:meth:`choose` without recording it)."""
        if not self.enabled or self._left > 0:
            return True
        if self._ar_left > 0:
            return False  # inside an AR stretch
        if self.parallel_ms.value is None and self.ar_ms.value is not None and self.wait >= self.opening():
            self._left, self._sum = self.burst, 0  # the deferred opening burst
            return True
        if self.ar_ms.value is not None and self.parallel_ms.value is not None:
            if self.winning():
                if self.run < self._every:
                    return True
            else:
                ar, ratio = self.ar_ms.value, self.cost_ratio()
                assert self.tokens.value is not None
                # the burst's loss, and the excess of the first AR step after it (the switch back)
                lost = self.burst * (ratio - self.tokens.value) * ar + max(0.0, self._ar_first - ar)
                span = self.burst * max(1.0, ratio)
                due = probe_wait(lost, ar, self.budget, self.backoff * span, self.max_backoff * span)
                if self.wait >= due:
                    self._left, self._sum = self.burst, 0  # a probe
                    self.probes += 1
                    return True
        if self.run > 0 or self.ar_ms.value is None:  # AR after parallel steps (or never measured): a stretch
            self._ar_left, self._ar_first, self._ar_sum = self.burst, 0.0, 0.0
        return False

    def observe(self, step: StepCost) -> None:
        """Record the step :meth:`choose` chose: the tokens it committed and its wall time."""
        self.record(self._chosen, step.accepted + 1, step.propose_ms + step.verify_ms)

    def record(self, parallel: bool, tokens: int, ms: float) -> None:
        """Record a step: its kind, the tokens it committed and its wall time."""
        if not self.enabled:
            return
        if not parallel:
            self.ar_steps += 1
            self.wait += 1
            self.run = 0
            if self._ar_left <= 0:  # AR winning: a running average
                self.ar_ms.add(ms)
                return
            if self._ar_left == self.burst:
                self._ar_first = ms
            else:
                self._ar_sum += ms
            self._ar_left -= 1
            if self._ar_left == 0:  # a stretch ends: its steps but the first give AR's cost
                refreshed = self.ar_ms.value is not None and self.winning()
                later = self.burst - 1
                self.ar_ms.set(self._ar_sum / later if later else self._ar_first)
                if self.parallel_ms.value is not None:  # the parallel steps just before, side by side
                    self._seen_ratio = self.parallel_ms.value / self.ar_ms.value
                if refreshed and self.winning():  # the method still wins: measure AR less often
                    self._every = min(2 * self._every, self.max_refresh)
            return
        self.parallel_ms.add(ms)
        self.wait = 0  # AR steps are counted from the last parallel one
        self.run += 1
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


def expected_tokens(alpha: float, gamma: int) -> float:
    """Tokens one step commits on average when each draft token is accepted with probability ``alpha``
    (independently, as in Leviathan et al.): the accepted prefix plus the target's own token."""
    if alpha >= 1.0:
        return gamma + 1.0
    return (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)


def best_gamma(
    alpha: float, draft_cost: float, verify_cost: Callable[[int], float], gamma_max: int, gamma_min: int = 1
) -> int:
    """The draft length with the most expected tokens per unit of time: a step costs ``gamma`` draft
    forwards (``draft_cost`` each) plus one verify forward over ``gamma + 1`` tokens (``verify_cost(k)``),
    all in the same unit. On a CPU where a wide verify costs ~1x a narrow one and the draft is cheap,
    this is long; with an expensive draft or a low acceptance rate it shrinks to 1, or with
    ``gamma_min=0`` to 0: a plain AR step, when no draft pays for itself at all."""
    return max(
        range(gamma_min, gamma_max + 1),
        key=lambda g: expected_tokens(alpha, g) / (g * draft_cost + verify_cost(g + 1)),
    )


def ema_step(value: float, sample: float, decay: float) -> float:
    """An exponential average moved by one sample."""
    return decay * value + (1 - decay) * sample


class CostTracker:
    """Running estimates of what :func:`best_gamma` needs, and the schedule that probes a draft it turned off.

    Estimates: the acceptance rate (an exponential average of each step's accepted/proposed from an even
    prior), the draft's cost per token and the verify forward's cost per width (ms; an unseen width takes
    the nearest measured one). Cost samples go through :class:`~fastforward.core.pacing.Ema`, whose first
    sample is provisional; the draft's first sample of each request and of each probe is provisional again,
    because that step pays for the draft catching up on the context (a draft model prefills it), and one
    provisional sample alone never turns the draft off.

    When no draft length pays (a draft that is slow or rarely right on this machine and text) it returns 0
    and the step is plain AR. While off, the draft is probed as :class:`~fastforward.core.pacing.StepGate`
    probes a parallel step: a burst of ``burst`` drafted steps after ``backoff * burst * cost ratio`` AR
    steps (``max_backoff`` in place of ``backoff`` for a draft that would not pay even if always right),
    whose acceptance replaces the estimate and whose cost is measured afresh; a probe that still
    loses doubles the back-off (up to ``max_backoff``), one that wins turns the draft back on. A draft that
    never pays costs about its probes (~1/backoff of the steps); one that starts paying (repetitive text)
    comes back within one back-off. (No loss budget as in the gate's :func:`probe_wait`: a probe drafts 1
    token a step, whose verify costs ~1.1-1.5x an AR step, so its loss stays within the back-off's share.)

    Keyed acceptance: a drafter that can say, before the step, how much to trust this step's draft (prompt
    lookup: the length of the n-gram it matched) passes that as ``key`` to :meth:`choose` and
    :meth:`record`, and each key keeps an acceptance estimate of its own (the pooled one is where an unseen
    key starts). Why: SmolLM2's and the 1.5B's greedy outputs, prompt lookup simulated on every position
    (results/pacing_s63/lookup_by_match.txt), accept a 1-token match's first draft token far less often
    than a 3-token match's; one pooled estimate drawn down by the 1-token matches kept the long ones from
    drafting (on the 1.5B's W8A8 HumanEval run ``ngram_min=2`` gave 2.21x against the pooled default's
    1.68x, results/compiled_s62/pld_sched.md).

    AR's own cost (the 1-token verify) is measured, never inferred from wider verifies: once the draft's cost
    is known, a tracker that has not timed two 1-token steps yet takes ``burst`` plain AR steps. Why: a draft
    that is nearly always right never leaves room for an AR step, and the nearest measured width stood in
    for it. SmolLM2 in bf16 on an AMX Xeon, where a 4-6 token verify costs 1.3-1.6x a 1-token one: a qsd copy
    right 97% of the time but costing 18 ms a token kept drafting for a whole run at 0.87x of AR, whose
    steps cost ~20 ms (results/compiled_s36/bench_humaneval_amx_bf16.md).
    """

    PRIOR = 0.5

    timed = True  # a CostTracker is the timed schedule; an untimed row keeps its fixed gamma

    def __init__(
        self,
        start: int = 5,
        decay: float = 0.7,
        burst: int = 3,
        min_backoff: int = 8,
        max_backoff: int = 64,
    ) -> None:
        """``start``: the draft length until a cost is measured (the configured gamma)."""
        self.start = start
        self.decay, self.burst, self.min_backoff, self.max_backoff = decay, burst, min_backoff, max_backoff
        self.alpha = self.PRIOR
        self.alphas: dict[Hashable, float] = {}  # per key (see the class docstring)
        self.draft_ms = Ema(decay)  # per draft token
        self.verify_ms: dict[int, Ema] = {}  # per width (tokens fed)
        self.backoff, self.wait = min_backoff, 0  # wait: AR steps since the last drafted one
        self.off_steps = self.probes = 0
        self.gamma_max = 1
        self._left, self._sum = 0, [0, 0]  # drafted steps left in a probe; its (proposed, accepted)
        self._key_sums: dict[Hashable, list[int]] = {}  # the probe's (proposed, accepted) per key
        self._ar_left = 0  # plain AR steps left in the stretch that measures AR's own cost
        self._cold = False  # the next drafted step pays the draft's catch-up: its cost sample is provisional
        self._at_begin = (0, 0)

    def begin(self) -> CostTracker:
        """Start a request: estimates and back-off carry over (this machine's costs; a workload's text moves
        less between its requests than relearning would cost, and a draft that is off is not even prefilled),
        the draft's next cost sample is provisional (it re-reads the prompt), :meth:`extras` counts from here."""
        self._at_begin = (self.off_steps, self.probes)
        self._cold = True
        return self

    def reopen(self) -> None:
        """Forget every estimate (a warm-up's must not decide the measured run)."""
        self.__init__(self.start, self.decay, self.burst, self.min_backoff, self.max_backoff)

    def verify_cost(self, k: int) -> float:
        """The verify forward's cost at width ``k``: the nearest measured width's, never above a wider
        width's. A wider forward never costs less, and the narrow widths are measured only while the draft is
        off: without the bound, one slow AR step (a busy moment) left a stale high estimate that made every
        later draft look paying (a layerskip draft kept drafting at 16% acceptance, 0.77x of AR)."""
        known = {w: e.value for w, e in self.verify_ms.items() if e.value is not None}
        nearest = known[min(known, key=lambda w: (abs(w - k), w))]
        return min([nearest, *(v for w, v in known.items() if w >= k)])

    def acceptance(self, key: Hashable | None = None) -> float:
        """The acceptance estimate for a step drafted under ``key``: its own, else the pooled one."""
        return self.alpha if key is None else self.alphas.get(key, self.alpha)

    def _best(self, gamma_min: int, key: Hashable | None = None) -> int:
        assert self.draft_ms.value is not None
        alpha = min(self.acceptance(key), 0.99)
        return best_gamma(alpha, self.draft_ms.value, self.verify_cost, self.gamma_max, gamma_min)

    def _could_pay(self) -> bool:
        """Whether some draft length would beat a plain AR step at the measured costs if the draft were
        nearly always right (acceptance 0.99)."""
        assert self.draft_ms.value is not None
        return best_gamma(0.99, self.draft_ms.value, self.verify_cost, self.gamma_max, 0) > 0

    def choose(self, limit: int, key: Hashable | None = None) -> int:
        """This step's draft length, at most ``limit`` (0: a plain AR step); ``key``: what the drafter knows of
        this step's draft before it runs (the class docstring), None for a drafter that knows nothing."""
        self.gamma_max = limit
        if self.draft_ms.value is None or not self.verify_ms:
            return self.start  # nothing measured yet: the configured gamma
        if self._ar_left > 0:
            return 0  # measuring AR's own cost
        if self._left > 0 or self.draft_ms.count < 2:
            return self._best(1, key)  # inside a probe, or one cold draft sample only: keep drafting
        one = self.verify_ms.get(1)
        if one is None or one.count < 2:  # AR's cost never timed: a stretch of AR steps measures it
            self._ar_left = self.burst
            return 0
        g = self._best(0, key)
        if g > 0:
            return g
        g1 = self._best(1, key)
        ratio = max(1.0, (g1 * self.draft_ms.value + self.verify_cost(g1 + 1)) / self.verify_cost(1))
        if self.wait < self.backoff * self.burst * ratio:
            return 0
        # a probe measures acceptance; when not even a draft that is always right would pay at the measured
        # costs (an int8 copy of a compiled target drafts at ~1x its cost), only the costs can change, so
        # it waits the longest back-off (checked only once the usual one has passed: not every AR step)
        if self._could_pay() or self.wait >= self.max_backoff * self.burst * ratio:
            self._left, self._sum, self._key_sums = self.burst, [0, 0], {}  # a probe
            self.probes += 1
            self._cold = True  # its first step pays the draft's catch-up over the AR stretch
            return g1
        return 0

    def note_other(self, width: int, verify_ms: float) -> None:
        """A step another drafter of the row drafted (``lookup_first``'s other source): its verify forward's
        cost at ``width`` is this machine's all the same; for this draft it is a step sat out, so the
        back-off's wait counts it, but it is no AR step (it measures neither AR's own cost nor acceptance)."""
        self.verify_ms.setdefault(width, Ema(self.decay)).add(verify_ms)
        self.wait += 1

    def observe(self, step: StepCost, key: Hashable | None = None) -> None:
        """Record a step: draft tokens proposed and accepted, and the draft's and the verify's wall time;
        ``key`` as given to :meth:`choose` for it."""
        self.record(step.guesses, step.accepted, step.propose_ms, step.verify_ms, key)

    def record(
        self, proposed: int, accepted: int, draft_ms: float, verify_ms: float, key: Hashable | None = None
    ) -> None:
        """:meth:`observe` in plain numbers."""
        self.verify_ms.setdefault(proposed + 1, Ema(self.decay)).add(verify_ms)
        if not proposed:  # an AR step (draft off, or it found nothing): nothing learned about the draft
            self._ar_left = max(0, self._ar_left - 1)
            self.wait += 1
            self.off_steps += 1
            return
        self.wait = 0
        if self._cold:
            self.draft_ms.demote()
            self._cold = False
        self.draft_ms.add(draft_ms / proposed)
        if self._left <= 0:  # drafting: running averages
            if key is not None:
                self.alphas[key] = ema_step(self.acceptance(key), accepted / proposed, self.decay)
            self.alpha = ema_step(self.alpha, accepted / proposed, self.decay)
            return
        self._sum = [self._sum[0] + proposed, self._sum[1] + accepted]
        if key is not None:
            got = self._key_sums.setdefault(key, [0, 0])
            got[0], got[1] = got[0] + proposed, got[1] + accepted
        self._left -= 1
        if self._left == 0:  # a probe ends: its rates replace the estimates (the text has moved on)
            self.alpha = self._sum[1] / self._sum[0]
            self.alphas.update({k: a / p for k, (p, a) in self._key_sums.items()})
            self._key_sums = {}
            # won: some draft pays again, for the most trusted key the probe or an earlier step saw
            trusted = max(self.alphas, key=self.alphas.__getitem__, default=None)
            won = self._best(0, trusted) > 0
            self.backoff = self.min_backoff if won else min(2 * self.backoff, self.max_backoff)

    def extras(self) -> dict[str, int]:
        """This request's AR steps (draft off or empty) and probes of a draft that was off."""
        return {
            "gamma_auto_ar_steps": self.off_steps - self._at_begin[0],
            "gamma_auto_probes": self.probes - self._at_begin[1],
        }

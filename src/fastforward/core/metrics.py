"""Totals over many generations, and the rates derived from them: the one place that sums DecodeStats.

Every report of a method's speed (``bench``, ``eval-cllm``, ``cllm-curve``, ``train-chimera --eval``,
``chimera-report``) divides sums, never averages per-generation rates: tokens per second is all new tokens
over all wall time and tokens per forward is all new tokens over all target forwards (Spec-Bench), so a long
answer weighs as much as its tokens and a short one cannot swing the figure. Keeping the sums and the
divisions here means the reports cannot drift apart in how they count (or in what they do with zero).

Two inputs, one total: live :class:`~fastforward.core.stats.DecodeStats` (:meth:`DecodeTotals.add`), and the
per-generation records a bench result stores (:func:`generation_record` writes them, :func:`record_totals`
sums them again, e.g. per dataset, long after the run).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fastforward.core.stats import DecodeStats, add_to_hist, mean_width


def merge_extras(acc: dict[str, Any], new: Mapping[str, Any]) -> None:
    """Fold one generation's method-specific ``extras`` into ``acc`` in place.

    Numbers are counters, so they are summed; lists of numbers are per-position counters (accepted tokens
    per head, histograms), so they are summed element-wise, the shorter one padded with zeros. Anything
    else (flags such as bools, strings, lists of other things) describes the run rather than counting it:
    the last value wins.
    """
    for k, v in new.items():
        if isinstance(v, bool) or not isinstance(v, (int, float, list)):
            acc[k] = v
        elif isinstance(v, list):
            cur = acc.setdefault(k, [])
            if all(isinstance(x, (int, float)) for x in v):
                cur.extend([0] * (len(v) - len(cur)))
                for i, x in enumerate(v):
                    cur[i] += x
        else:
            acc[k] = acc.get(k, 0) + v


@dataclass
class DecodeTotals:
    """Sums over generations of one method; the derived rates are properties, so they are never stale.

    ``identical``/``compared`` count generations whose tokens equal the reference's (greedy AR), among those
    that were compared at all (sampled runs compare nothing).
    """

    generations: int = 0
    new_tokens: int = 0
    wall_time_s: float = 0.0
    target_forwards: int = 0
    draft_time_s: float = 0.0
    identical: int = 0
    compared: int = 0
    extras: dict[str, Any] = field(default_factory=dict)
    # what ran: decode forwards that fed the last token alone (AR steps) vs guesses too (parallel steps),
    # the guessed tokens fed, and the width histogram (live stats only; stored records keep the counts)
    ar_steps: int = 0
    parallel_steps: int = 0
    drafted_tokens: int = 0
    width_hist: list[int] = field(default_factory=list)

    def add(self, stats: DecodeStats, identical: bool | None = None) -> None:
        """Count one generation; ``identical`` None: not compared with the reference."""
        self.generations += 1
        self.new_tokens += stats.new_tokens
        self.wall_time_s += stats.wall_time_s
        self.target_forwards += stats.target_forwards
        self.draft_time_s += stats.draft_time_s
        self.ar_steps += stats.ar_steps
        self.parallel_steps += stats.parallel_steps
        self.drafted_tokens += stats.drafted_tokens
        for w, n in enumerate(stats.width_hist):
            if n:
                add_to_hist(self.width_hist, w, n)
        self._compare(identical)
        merge_extras(self.extras, stats.extras)

    @property
    def ar_step_share(self) -> float | None:
        """Share of decode forwards (prefill excluded) that were plain AR steps; None without any."""
        total = self.ar_steps + self.parallel_steps
        return self.ar_steps / total if total else None

    @property
    def mean_width(self) -> float | None:
        """Mean tokens fed per decode forward (from the histogram of live stats)."""
        return mean_width(self.width_hist)

    def _compare(self, identical: bool | None) -> None:
        if identical is not None:
            self.compared += 1
            self.identical += int(identical)

    @property
    def tokens_per_s(self) -> float:
        """New tokens over wall time; 0.0 when nothing was timed."""
        return self.new_tokens / self.wall_time_s if self.wall_time_s else 0.0

    @property
    def mean_accepted_tokens(self) -> float | None:
        """New tokens per target forward (prefill counted); None when there was no forward to divide by."""
        return self.new_tokens / self.target_forwards if self.target_forwards else None

    @property
    def identical_rate(self) -> float | None:
        """Share of compared generations identical to the reference; None when none was compared."""
        return self.identical / self.compared if self.compared else None

    @property
    def draft_time_share(self) -> float:
        """Share of wall time spent proposing (draft model, heads, pools); 0.0 when nothing was timed."""
        return self.draft_time_s / self.wall_time_s if self.wall_time_s else 0.0


def generation_record(stats: DecodeStats, identical: bool | None) -> dict[str, Any]:
    """The counted fields of one generation as a bench result stores them (``per_sample`` entries).

    Written next to :func:`record_totals`, which reads them back, so the two cannot disagree on a key.
    Wall time is rounded to 0.1 ms: finer digits are timer noise and only bloat the JSON.
    """
    return {
        "new_tokens": stats.new_tokens,
        "wall_time_s": round(stats.wall_time_s, 4),
        "target_forwards": stats.target_forwards,
        "ar_steps": stats.ar_steps,
        "parallel_steps": stats.parallel_steps,
        "identical_to_ar": identical,
    }


def record_totals(records: Iterable[Mapping[str, Any]]) -> DecodeTotals:
    """Sum stored per-generation records (e.g. one dataset's share of a bench run) into totals.

    Records hold no draft time and no extras, so those stay zero/empty; a record whose ``identical_to_ar``
    is None (not compared) does not count as compared; records written before steps were split into AR and
    parallel ones count neither.
    """
    totals = DecodeTotals()
    for r in records:
        totals.generations += 1
        totals.new_tokens += r["new_tokens"]
        totals.wall_time_s += r["wall_time_s"]
        totals.target_forwards += r["target_forwards"]
        totals.ar_steps += r.get("ar_steps", 0)
        totals.parallel_steps += r.get("parallel_steps", 0)
        totals._compare(r["identical_to_ar"])
    return totals


def speedup_interval(
    method: list[tuple[int, float]],
    base: list[tuple[int, float]],
    level: float = 0.9,
    draws: int = 2000,
    seed: int = 0,
) -> tuple[float, float] | None:
    """The bootstrap percentile interval (``level``) of a method's speedup over the baseline, from the
    (new tokens, wall seconds) of each on the same turns, resampled as pairs so a turn's text weighs on both
    sides alike; each draw divides sums, as the speedup itself does. None with fewer than two turns or
    unequal lists. Seeded: the same records give the same interval.

    Why: one process's speed moves by 10-20% between generations on these machines (the same AR code read
    56.7-82.5 tok/s across processes, and two methods that both ran plain AR steps read 0.92x and 1.08x of AR
    in one run, session 47), so a speedup of 0.95x from 8 generations may be no difference at all. The
    interval says how far the turns themselves let the figure move; it does not cover a machine that is
    slower for the whole run."""
    n = len(method)
    if n < 2 or len(base) != n:
        return None
    import random

    rng = random.Random(seed)
    ratios = []
    for _ in range(draws):
        pick = [rng.randrange(n) for _ in range(n)]
        m_tok, m_s = sum(method[i][0] for i in pick), sum(method[i][1] for i in pick)
        b_tok, b_s = sum(base[i][0] for i in pick), sum(base[i][1] for i in pick)
        if m_s > 0 and b_s > 0 and b_tok > 0:
            ratios.append((m_tok / m_s) / (b_tok / b_s))
    if not ratios:
        return None
    ratios.sort()
    tail = (1 - level) / 2
    return ratios[int(tail * (len(ratios) - 1))], ratios[int((1 - tail) * (len(ratios) - 1))]

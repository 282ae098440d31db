"""Trajectory augmentation and cleaning (CLLM section 3.2.1), as pure functions over token ids.

Augmentation: Jacobi states usually look "correct, correct, wrong, wrong"; to also teach "correct, wrong,
correct" we add copies of intermediate states in which some wrong tokens are replaced by their fixed-point
value, never the first wrong one (so each augmented state is still a state the model must repair). They go
into ``TrajectoryRecord.meta["augmented"]`` and are used by the global consistency loss only (the local loss
needs true neighbours).

Cleaning: the teacher sometimes loops. A block is dropped when its answer (prompt excluded) shows a run of
``max_run`` identical tokens, an n-gram repeated ``max_ngram_repeats`` times, or a repeated sentence
(token span between sentence delimiters): the rules of :mod:`fastforward.eval.repetition`, applied to the
part of the answer the block adds. The reference only catches single-token runs.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from fastforward.cllm.trajectories import TrajectoryRecord, group_by_prompt
from fastforward.eval.repetition import RepetitionRules, longest_run, max_ngram_count, repeated_sentence


@dataclass(frozen=True)
class CleanConfig(RepetitionRules):
    """The repetition thresholds (judged on each block's answer so far) plus what happens after a bad block."""

    drop_rest_of_prompt: bool = True  # after a dropped block, drop the prompt's later blocks too


@dataclass
class CleanReport:
    records_in: int = 0
    kept: int = 0
    dropped_run: int = 0
    dropped_ngram: int = 0
    dropped_sentence: int = 0
    dropped_after_bad_block: int = 0
    augmented_states: int = 0
    examples: list[str] = field(default_factory=list)  # a few "prompt_id/block: reason"

    def to_dict(self) -> dict:
        return asdict(self)

    def summary(self) -> str:
        return (
            f"data: {self.records_in} blocks in, {self.kept} kept; dropped {self.dropped_run} (token run), "
            f"{self.dropped_ngram} (repeated n-gram), {self.dropped_sentence} (repeated sentence), "
            f"{self.dropped_after_bad_block} (after a dropped block); {self.augmented_states} augmented states"
        )


# --------------------------------------------------------------------------- cleaning


def bad_block_reason(
    rec: TrajectoryRecord, cfg: CleanConfig, delimiters: set[int] | None = None
) -> str | None:
    """Why this block is low quality, judged on the answer through this block; None if it is fine."""
    answer = rec.teacher_output_ids[rec.prompt_len :]
    new_from = len(answer) - len(rec.fixed_point)
    if cfg.max_run and longest_run(answer[max(0, new_from - cfg.max_run + 1) :]) >= cfg.max_run:
        return "run"
    if cfg.max_ngram_repeats and max_ngram_count(answer, cfg.ngram, new_from) >= cfg.max_ngram_repeats:
        return "ngram"
    if delimiters and repeated_sentence(answer, delimiters, cfg.min_sentence_tokens, new_from):
        return "sentence"
    return None


def clean(
    records: Sequence[TrajectoryRecord], cfg: CleanConfig, delimiters: set[int] | None = None
) -> tuple[list[TrajectoryRecord], CleanReport]:
    report = CleanReport(records_in=len(records))
    kept: list[TrajectoryRecord] = []
    for pid, recs in group_by_prompt(records).items():
        bad = False
        for r in recs:
            if bad and cfg.drop_rest_of_prompt:
                report.dropped_after_bad_block += 1
                continue
            reason = bad_block_reason(r, cfg, delimiters)
            if reason:
                bad = True
                setattr(report, f"dropped_{reason}", getattr(report, f"dropped_{reason}") + 1)
                if len(report.examples) < 20:
                    report.examples.append(f"{pid}/{r.block_index}: {reason}")
                continue
            kept.append(r)
    report.kept = len(kept)
    return kept, report


# --------------------------------------------------------------------------- augmentation


def augment_state(state: Sequence[int], fixed: Sequence[int], rng: random.Random) -> list[int] | None:
    """Correct a random non-empty subset of the wrong tokens except the first one; None if < 2 wrong."""
    wrong = [i for i, (a, b) in enumerate(zip(state, fixed, strict=True)) if a != b]
    if len(wrong) < 2:
        return None
    candidates = wrong[1:]
    k = rng.randint(1, len(candidates))
    out = list(state)
    for i in rng.sample(candidates, k):
        out[i] = fixed[i]
    return out


def augment(records: Sequence[TrajectoryRecord], seed: int = 0, per_state: int = 1) -> int:
    """Add ``per_state`` augmented copies of each intermediate state (not y(0), not y*) to record.meta.

    Deterministic given the seed and the record keys. Returns the number of states added.
    """
    added = 0
    for r in records:
        rng = random.Random(f"aug:{seed}:{r.prompt_id}:{r.block_index}")
        aug: list[list[int]] = []
        for s in r.trajectory[1:-1]:
            for _ in range(per_state):
                a = augment_state(s, r.fixed_point, rng)
                if a is not None and a != s:
                    aug.append(a)
        r.meta["augmented"] = aug
        added += len(aug)
    return added


def prepare(
    records: Sequence[TrajectoryRecord],
    clean_cfg: CleanConfig,
    delimiters: set[int] | None = None,
    augment_per_state: int = 0,
    seed: int = 0,
) -> tuple[list[TrajectoryRecord], CleanReport]:
    """Clean, then augment: the training set and a report of what was dropped or added."""
    kept, report = clean(records, clean_cfg, delimiters)
    if augment_per_state:
        report.augmented_states = augment(kept, seed, augment_per_state)
    return kept, report

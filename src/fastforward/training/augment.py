"""Trajectory augmentation and cleaning (CLLM section 3.2.1), as pure functions over token ids.

Augmentation: Jacobi states usually look "correct, correct, wrong, wrong"; to also teach "correct, wrong,
correct" we add copies of intermediate states in which some wrong tokens are replaced by their fixed-point
value, never the first wrong one (so each augmented state is still a state the model must repair). They go
into ``TrajectoryRecord.meta["augmented"]`` and are used by the global consistency loss only (the local loss
needs true neighbours).

Cleaning: the teacher sometimes loops. A block is dropped when its answer (prompt excluded) shows a run of
``max_run`` identical tokens, an n-gram repeated ``max_ngram_repeats`` times, or a repeated sentence
(token span between sentence delimiters). The reference only catches single-token runs.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from fastforward.training.trajectories import TrajectoryRecord, group_by_prompt


@dataclass(frozen=True)
class CleanConfig:
    max_run: int = 10  # drop on a run of >= max_run identical tokens (0 disables)
    ngram: int = 8
    max_ngram_repeats: int = 3  # drop when an n-gram ending in the block occurs this often (0 disables)
    min_sentence_tokens: int = 6  # repeated sentences shorter than this are allowed (0 disables the rule)
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


# --------------------------------------------------------------------------- detectors


def longest_run(tokens: Sequence[int]) -> int:
    best = cur = 0
    prev = None
    for t in tokens:
        cur = cur + 1 if t == prev else 1
        prev = t
        best = max(best, cur)
    return best


def max_ngram_count(tokens: Sequence[int], n: int, new_from: int = 0) -> int:
    """Largest occurrence count (over the whole sequence) of an n-gram that ends at or after ``new_from``."""
    if n <= 0 or len(tokens) < n:
        return 0
    grams = Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))
    start = max(0, new_from - n + 1)
    return max((grams[tuple(tokens[i : i + n])] for i in range(start, len(tokens) - n + 1)), default=0)


def sentences(tokens: Sequence[int], delimiters: set[int]) -> list[tuple[int, tuple[int, ...]]]:
    """(end index, sentence tokens incl. delimiter) for each delimited sentence."""
    out, start = [], 0
    for i, t in enumerate(tokens):
        if t in delimiters:
            out.append((i, tuple(tokens[start : i + 1])))
            start = i + 1
    return out


def repeated_sentence(tokens: Sequence[int], delimiters: set[int], min_len: int, new_from: int = 0) -> bool:
    """A sentence of >= min_len tokens ending at or after ``new_from`` also occurs earlier."""
    if not delimiters or min_len <= 0:
        return False
    seen: set[tuple[int, ...]] = set()
    for end, s in sentences(tokens, delimiters):
        key = tuple(t for t in s if t not in delimiters)
        if len(key) >= min_len:
            if end >= new_from and key in seen:
                return True
            seen.add(key)
    return False


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


def is_repetitive(tokens: Sequence[int], cfg: CleanConfig, delimiters: set[int] | None = None) -> bool:
    """The same rules over a whole output (used for the repetition rate of generated answers)."""
    return bool(
        (cfg.max_run and longest_run(tokens) >= cfg.max_run)
        or (cfg.max_ngram_repeats and max_ngram_count(tokens, cfg.ngram) >= cfg.max_ngram_repeats)
        or (delimiters and repeated_sentence(tokens, delimiters, cfg.min_sentence_tokens))
    )


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

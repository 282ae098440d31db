"""Batched Jacobi trajectory collection (CLLM Algorithm 1), several prompts per forward.

Every row of the batch decodes one n-token block by Jacobi iteration after its own prefix (prompt + earlier
fixed points). Rows are left-padded in one KV cache, so all blocks sit in the same columns: a forward feeds
``[B, n]`` states with per-row ``position_ids`` and a 4D mask that hides each row's padding. Blocks are
synchronous: a row whose block converged feeds its (unchanging) fixed point until the slowest row converges,
then every row's fixed point is already in the cache. Rows that finish (EOS or length cap) leave at a block
boundary; waiting prompts are prefilled together and merged into the cache (left-padded), so the batch stays
full. One record per (prompt, block) is written and fsynced as soon as the block converges. The iteration
rule and the initial guess are the Jacobi decoder's (:mod:`fastforward.decoders.jacobi`); cache surgery and
masks are :mod:`fastforward.core`'s, so sliding-window models work here too.

Iteration rule (eq. 3): feeding state y(j) gives y(j+1) = [argmax after the prefix, argmax after y(j)_1, ...].
The block has converged when y(j+1) equals y(j) on its first m tokens (m = block size, or fewer at the length
cap, or up to and including a fixed EOS); the trajectory stored is y(0) (random tokens drawn from the prefix,
as in the reference) ... y(j) = y*.
"""

from __future__ import annotations

import random
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache

from fastforward.cllm.trajectories import TrajectoryRecord, TrajectoryWriter
from fastforward.core.cache import (
    append_rows,
    cache_length,
    left_pad,
    new_cache,
    rollback,
    select_rows,
    trim_left,
)
from fastforward.core.call import model_call
from fastforward.core.masks import padded_block_mask, padded_prefill_mask
from fastforward.decoders.jacobi import converged_length, initial_guess, next_iterate
from fastforward.errors import FastForwardError


@dataclass(frozen=True)
class CollectConfig:
    block_size: int = 16
    max_new_tokens: int = 256
    batch_size: int = 4
    seed: int = 0

    def validate(self) -> None:
        if self.block_size < 1 or self.max_new_tokens < 1 or self.batch_size < 1:
            raise FastForwardError("block_size, max_new_tokens and batch_size must be >= 1")


@dataclass(frozen=True)
class PromptJob:
    prompt_id: str
    prompt_ids: list[int]
    answer_ids: list[int] | None = None


@dataclass
class CollectStats:
    prompts: int = 0
    prompts_skipped: int = 0  # already complete in the output file
    records: int = 0
    tokens: int = 0  # fixed-point tokens written
    states: int = 0  # trajectory states written (init and fixed point included)
    forwards: int = 0  # batched block forwards (prefills not counted)
    row_forwards: int = 0  # sum over forwards of rows that were still iterating
    wall_time_s: float = 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.wall_time_s if self.wall_time_s else 0.0


@dataclass
class _Row:
    job: PromptJob
    seq: list[int]  # prompt + fixed points so far
    block_index: int
    generated: int  # fixed-point tokens so far
    pad: int = 0
    next_first: int = -1  # greedy token after seq (from the last forward)
    state: list[int] = field(default_factory=list)
    trajectory: list[list[int]] = field(default_factory=list)
    m: int = 0  # tokens this block must fix
    converged: bool = False
    fixed_len: int = 0
    next_after: int = -1
    done: bool = False


# --------------------------------------------------------------------------- pure helpers


def init_state(prefix: Sequence[int], n: int, seed: int, prompt_id: str, block_index: int) -> list[int]:
    """y(0): the Jacobi decoder's random initial guess (n tokens drawn from the prefix), seeded per
    (prompt, block) so that a resumed collection draws the same states."""
    rng = random.Random(f"{seed}:{prompt_id}:{block_index}")
    return initial_guess("random", n, prefix, rng, pad_id=0)


# --------------------------------------------------------------------------- the collector


class BatchedJacobiCollector:
    """Collect Jacobi trajectories of ``model`` for many prompts, ``batch_size`` prompts per forward."""

    def __init__(
        self,
        model: torch.nn.Module,
        eos_token_ids: Sequence[int],
        config: CollectConfig,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        config.validate()
        self.model = model
        self.eos = tuple(int(e) for e in eos_token_ids)
        self.cfg = config
        self.progress = progress
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        self.stats = CollectStats()

    # -- forwards

    def _prefill(self, rows: list[_Row]) -> DynamicCache:
        """Prefill new rows (left-padded together); sets pad and next_first. Returns their cache."""
        length = max(len(r.seq) for r in rows)
        ids = torch.zeros(len(rows), length, dtype=torch.long)
        pos = torch.zeros(len(rows), length, dtype=torch.long)
        for i, r in enumerate(rows):
            r.pad = length - len(r.seq)
            ids[i, r.pad :] = torch.tensor(r.seq)
            pos[i, r.pad :] = torch.arange(len(r.seq))
        cache = new_cache(self.model)
        mask = padded_prefill_mask(self.model, [r.pad for r in rows], length, self.dtype, self.device)
        out = model_call(self.model, ids.to(self.device), pos.to(self.device), mask, cache, keep=1)
        first = out.logits[:, -1].argmax(-1).tolist()
        for r, t in zip(rows, first, strict=True):
            r.next_first = int(t)
        return cache

    def _block(self, rows: list[_Row], cache: DynamicCache) -> None:
        """Run one synchronous Jacobi block for every row; leaves the fixed points in the cache."""
        n = self.cfg.block_size
        base = cache_length(cache)
        for r in rows:
            r.state = init_state(r.seq, n, self.cfg.seed, r.job.prompt_id, r.block_index)
            r.trajectory = [r.state[:]]
            r.m = min(n, self.cfg.max_new_tokens - r.generated)
            r.converged = False
        mask = padded_block_mask(self.model, [r.pad for r in rows], base, n, self.dtype, self.device)
        pos = torch.stack([torch.arange(n) + len(r.seq) for r in rows]).to(self.device)
        for _ in range(2 * n + 2):  # converges within m + 1 iterations in exact arithmetic
            ids = torch.tensor([r.state for r in rows], dtype=torch.long, device=self.device)
            logits = model_call(self.model, ids, pos, mask, cache).logits  # [B, n, V]
            pred = logits.argmax(-1).tolist()
            self.stats.forwards += 1
            for r, p in zip(rows, pred, strict=True):
                if r.converged:
                    continue
                self.stats.row_forwards += 1
                new = next_iterate(r.next_first, p, n)
                k = converged_length(r.state, new, r.m, self.eos)
                if k:
                    r.converged, r.fixed_len, r.next_after = True, k, int(p[k - 1])
                else:
                    r.state = new
                    r.trajectory.append(new[:])
            if all(r.converged for r in rows):
                return
            rollback(cache, base)
        raise FastForwardError("Jacobi iteration did not converge (non-deterministic forward?)")

    # -- main loop

    def run(self, jobs: Sequence[PromptJob], writer: TrajectoryWriter) -> CollectStats:
        t0 = time.perf_counter()
        pending: deque[_Row] = deque()
        for job in jobs:
            row = self._resume_row(job, writer)
            if row is None:
                self.stats.prompts_skipped += 1
            else:
                pending.append(row)
        total = len(pending)
        rows: list[_Row] = []
        cache: DynamicCache | None = None
        with torch.inference_mode():
            while pending or rows:
                free = self.cfg.batch_size - len(rows)
                new = [pending.popleft() for _ in range(min(free, len(pending)))]
                if new:
                    new_cache_ = self._prefill(new)
                    if cache is None or not rows:
                        cache = new_cache_
                    else:
                        a, b = cache_length(cache), cache_length(new_cache_)
                        left_pad(cache, b - a)
                        left_pad(new_cache_, a - b)
                        for r in rows:
                            r.pad += max(0, b - a)
                        for r in new:
                            r.pad += max(0, a - b)
                        append_rows(cache, new_cache_)
                    rows += new
                self._block(rows, cache)
                for r in rows:
                    self._commit(r, writer)
                keep = [i for i, r in enumerate(rows) if not r.done]
                if len(keep) < len(rows):
                    self.stats.prompts += len(rows) - len(keep)
                    rows = [rows[i] for i in keep]
                    if rows:
                        select_rows(cache, keep)
                        trim = min(r.pad for r in rows)
                        trim_left(cache, trim)
                        for r in rows:
                            r.pad -= trim
                    else:
                        cache = None
                self.stats.wall_time_s = time.perf_counter() - t0
                if self.progress:
                    self.progress(self._line(total - len(pending) - len(rows), total))
        self.stats.wall_time_s = time.perf_counter() - t0
        return self.stats

    def _resume_row(self, job: PromptJob, writer: TrajectoryWriter) -> _Row | None:
        last = writer.last.get(job.prompt_id)
        if last is None:
            return _Row(job=job, seq=list(job.prompt_ids), block_index=0, generated=0)
        if last.prompt_ids[: last.prompt_len] != list(job.prompt_ids):
            raise FastForwardError(
                f"{writer.path}: prompt '{job.prompt_id}' differs from the one in the file "
                "(another model, dataset or template?); use a new --out"
            )
        missing = [b for b in range(last.block_index) if (job.prompt_id, b) not in writer.existing]
        if missing:
            raise FastForwardError(f"{writer.path}: prompt '{job.prompt_id}' lacks blocks {missing}")
        generated = len(last.prompt_ids) - last.prompt_len + len(last.fixed_point)
        if last.eos or generated >= self.cfg.max_new_tokens or len(last.fixed_point) < self.cfg.block_size:
            return None
        return _Row(
            job=job, seq=last.teacher_output_ids, block_index=last.block_index + 1, generated=generated
        )

    def _commit(self, r: _Row, writer: TrajectoryWriter) -> None:
        k = r.fixed_len
        traj = [s[:k] for s in r.trajectory]
        fixed = traj[-1]
        rec = TrajectoryRecord(
            prompt_id=r.job.prompt_id,
            block_index=r.block_index,
            prompt_len=len(r.job.prompt_ids),
            prompt_ids=list(r.seq),
            trajectory=traj,
            eos=fixed[-1] in self.eos,
            answer_ids=r.job.answer_ids,
        )
        writer.write(rec)
        self.stats.records += 1
        self.stats.tokens += k
        self.stats.states += len(traj)
        r.seq = r.seq + fixed
        r.generated += k
        r.block_index += 1
        r.next_first = r.next_after
        r.done = rec.eos or r.generated >= self.cfg.max_new_tokens or k < self.cfg.block_size

    def _line(self, done: int, total: int) -> str:
        s = self.stats
        return (
            f"collect: {done}/{total} prompts, {s.records} blocks, {s.tokens} tokens, "
            f"{s.tokens_per_s:.1f} tok/s, {s.states / max(s.records, 1):.1f} states/block"
        )


def collect_trajectories(
    model: torch.nn.Module,
    eos_token_ids: Sequence[int],
    jobs: Sequence[PromptJob],
    out_path: str,
    config: CollectConfig,
    progress: bool = True,
) -> CollectStats:
    """Collect trajectories for ``jobs`` into ``out_path`` (resuming whatever is already there)."""

    def show(line: str) -> None:
        print(f"\r{line}", end="", file=sys.stderr, flush=True)

    with TrajectoryWriter(out_path) as writer:
        if writer.torn_bytes:
            print(f"collect: truncated a torn last line ({writer.torn_bytes} bytes)", file=sys.stderr)
        stats = BatchedJacobiCollector(model, eos_token_ids, config, show if progress else None).run(
            jobs, writer
        )
    if progress:
        print(file=sys.stderr)
    return stats

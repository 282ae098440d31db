"""Jacobi trajectory records: one per (prompt, block), stored as JSONL, written so that a killed run resumes.

Native record (one JSON object per line)::

    prompt_id     str        the dataset sample id ("gsm8k-17")
    block_index   int        0, 1, 2, ... within the prompt's answer
    prompt_len    int        length of the original prompt (chat template applied)
    prompt_ids    [P]        prompt + the fixed points of blocks 0..block_index-1
    trajectory    [S][m]     every block state y(0) (random init) ... y* (fixed point, last)
    fixed_point   [m]        = trajectory[-1]; m < block_size only for the last block (EOS / length cap)
    eos           bool       the fixed point ends with an EOS token
    answer_ids    [L] | null ground-truth answer ids (GSM8K gold solution + EOS), for --ar-target labels

``teacher_output_ids`` (prompt_ids + fixed_point: the teacher's answer through this block) and the full
teacher answer (the last block's teacher_output_ids) are derived, not stored. :func:`read_records` also
accepts the Consistency_LLM layout (JSONL or one JSON array): see docs/cllm.md for the field mapping.

The writer appends one line per record and fsyncs it; on restart it truncates a torn last line and reports
which (prompt_id, block_index) pairs exist so the collector skips them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastforward.errors import FastForwardError, read_user_text


@dataclass
class TrajectoryRecord:
    prompt_id: str
    block_index: int
    prompt_len: int
    prompt_ids: list[int]  # [P]
    trajectory: list[list[int]]  # [S][m], last state = fixed point
    eos: bool = False
    answer_ids: list[int] | None = None  # [L] gold answer, no prompt
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def fixed_point(self) -> list[int]:
        return self.trajectory[-1]

    @property
    def teacher_output_ids(self) -> list[int]:
        return self.prompt_ids + self.fixed_point

    @property
    def key(self) -> tuple[str, int]:
        return (self.prompt_id, self.block_index)

    def validate(self) -> None:
        if not self.trajectory:
            raise ValueError("empty trajectory")
        m = len(self.trajectory[-1])
        if m == 0:
            raise ValueError("empty fixed point")
        if any(len(s) != m for s in self.trajectory):
            raise ValueError("trajectory states differ in length from the fixed point")
        if not 0 < self.prompt_len <= len(self.prompt_ids):
            raise ValueError("prompt_len outside prompt_ids")

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "prompt_id": self.prompt_id,
            "block_index": self.block_index,
            "prompt_len": self.prompt_len,
            "prompt_ids": self.prompt_ids,
            "trajectory": self.trajectory,
            "fixed_point": self.fixed_point,
            "eos": self.eos,
            "answer_ids": self.answer_ids,
        }
        if self.meta:
            d["meta"] = self.meta
        return d


# --------------------------------------------------------------------------- parsing both layouts


def _flat(x: Any) -> list[int]:
    """Consistency_LLM stores some id lists nested as [[...]] (batch of one)."""
    while isinstance(x, list) and len(x) == 1 and isinstance(x[0], list):
        x = x[0]
    if not isinstance(x, list) or not all(isinstance(t, int) for t in x):
        raise ValueError("expected a list of token ids")
    return [int(t) for t in x]


def _suffix_int(x: Any) -> int:
    """'itr_3' -> 3, 'data_12' -> 12, 3 -> 3."""
    if isinstance(x, int):
        return x
    return int(str(x).rsplit("_", 1)[-1])


def from_json(obj: dict[str, Any]) -> TrajectoryRecord:
    """A native record or a Consistency_LLM record -> TrajectoryRecord (raises ValueError/KeyError)."""
    if "trajectory" in obj:
        rec = TrajectoryRecord(
            prompt_id=str(obj["prompt_id"]),
            block_index=int(obj["block_index"]),
            prompt_len=int(obj["prompt_len"]),
            prompt_ids=_flat(obj["prompt_ids"]),
            trajectory=[_flat(s) for s in obj["trajectory"]],
            eos=bool(obj.get("eos", False)),
            answer_ids=_flat(obj["answer_ids"]) if obj.get("answer_ids") else None,
            meta=dict(obj.get("meta") or {}),
        )
        if "fixed_point" in obj and _flat(obj["fixed_point"]) != rec.fixed_point:
            raise ValueError("fixed_point differs from the last trajectory state")
    elif "answer_trajectory_ids" in obj:
        prompt_ids = _flat(obj["prompt_ids"])
        states = [_flat(s) for s in obj["answer_trajectory_ids"]]
        plen = obj.get("prompt_ids_len", len(prompt_ids))
        plen = int(plen[0] if isinstance(plen, list) else plen)
        answer = None
        if obj.get("labels_ids"):
            labels = _flat(obj["labels_ids"])
            # their labels are prompt + gold answer: keep the answer part
            answer = labels[plen:] if labels[:plen] == prompt_ids[:plen] else labels
        rec = TrajectoryRecord(
            prompt_id=str(obj["data_id"]),
            block_index=_suffix_int(obj.get("jacobian_itr_id", 0)),
            prompt_len=plen,
            prompt_ids=prompt_ids,
            trajectory=states,
            eos=False,
            answer_ids=answer,
            meta={"layout": "consistency_llm"},
        )
    else:
        raise ValueError("neither a fastforward nor a Consistency_LLM trajectory record")
    rec.validate()
    return rec


def to_consistency_llm(rec: TrajectoryRecord) -> dict[str, Any]:
    """The same record in the Consistency_LLM layout (their nesting of [[ids]] included)."""
    out: dict[str, Any] = {
        "data_id": rec.prompt_id,
        "jacobian_itr_id": f"itr_{rec.block_index}",
        "prompt_ids_len": [rec.prompt_len],
        "prompt_ids": [rec.prompt_ids],
        "answer_trajectory_ids": rec.trajectory,
        "teacher_output_ids": [rec.teacher_output_ids],
    }
    if rec.answer_ids is not None:
        out["labels_ids"] = [rec.prompt_ids[: rec.prompt_len] + rec.answer_ids]
    return out


def read_records(path: str | Path) -> list[TrajectoryRecord]:
    """All records of a JSONL file (either layout) or of a JSON array file (Consistency_LLM's published sets).

    A line that is not a valid record raises FastForwardError naming the file and line.
    """
    path = Path(path)
    if not path.exists():
        raise FastForwardError(f"trajectory file not found: {path}")
    text = read_user_text(path, "trajectory file")
    if text.lstrip().startswith("["):
        try:
            items = json.loads(text)
        except json.JSONDecodeError as e:
            raise FastForwardError(f"{path}: not valid JSON at line {e.lineno}: {e.msg}") from None
        return [_parse(obj, path, i + 1, "record") for i, obj in enumerate(items)]
    out = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise FastForwardError(f"{path}:{lineno}: corrupt trajectory line ({e.msg})") from None
        out.append(_parse(obj, path, lineno, "line"))
    return out


def _parse(obj: Any, path: Path, n: int, what: str) -> TrajectoryRecord:
    try:
        if not isinstance(obj, dict):
            raise ValueError("not a JSON object")
        return from_json(obj)
    except (ValueError, KeyError, TypeError) as e:
        raise FastForwardError(f"{path}:{n}: invalid trajectory {what}: {type(e).__name__}: {e}") from None


def group_by_prompt(records: Iterable[TrajectoryRecord]) -> dict[str, list[TrajectoryRecord]]:
    """prompt_id -> its records sorted by block_index (insertion order of prompts kept)."""
    groups: dict[str, list[TrajectoryRecord]] = {}
    for r in records:
        groups.setdefault(r.prompt_id, []).append(r)
    for rs in groups.values():
        rs.sort(key=lambda r: r.block_index)
    return groups


# --------------------------------------------------------------------------- resumable writer


def repair_tail(path: Path) -> int:
    """Truncate a torn last line (no trailing newline, e.g. after SIGKILL mid-write). Returns bytes removed."""
    if not path.exists():
        return 0
    size = path.stat().st_size
    if size == 0:
        return 0
    with path.open("rb+") as f:
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return 0
        # find the last newline
        pos, chunk = size, 1 << 16
        keep = 0
        while pos > 0:
            start = max(0, pos - chunk)
            f.seek(start)
            buf = f.read(pos - start)
            i = buf.rfind(b"\n")
            if i >= 0:
                keep = start + i + 1
                break
            pos = start
        f.truncate(keep)
        f.flush()
        os.fsync(f.fileno())
        return size - keep


class TrajectoryWriter:
    """Append-only JSONL writer; every record is flushed and fsynced before ``write`` returns."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.torn_bytes = repair_tail(self.path)
        self.existing: set[tuple[str, int]] = set()
        self.last: dict[str, TrajectoryRecord] = {}  # prompt_id -> highest block present
        if self.path.exists() and self.path.stat().st_size:
            for r in read_records(self.path):
                self.existing.add(r.key)
                if r.prompt_id not in self.last or r.block_index > self.last[r.prompt_id].block_index:
                    self.last[r.prompt_id] = r
        self._f = self.path.open("a", encoding="utf-8")

    def write(self, rec: TrajectoryRecord) -> None:
        if rec.key in self.existing:
            return  # never duplicate a (prompt, block)
        self._f.write(json.dumps(rec.to_json(), separators=(",", ":")) + "\n")
        self._f.flush()
        os.fsync(self._f.fileno())
        self.existing.add(rec.key)
        self.last[rec.prompt_id] = rec

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> TrajectoryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def merge_trajectory_files(out: str | Path, parts: Sequence[str | Path]) -> tuple[int, int]:
    """Append to ``out`` every record of ``parts`` (the shards of a multi-process collection) that ``out`` does
    not hold yet; returns (records added, records in ``out``). Idempotent: a rerun adds nothing twice, and
    the shards stay, so each rank resumes from its own file."""
    added = 0
    with TrajectoryWriter(out) as writer:
        for part in parts:
            if not Path(part).exists():
                continue
            for rec in read_records(part):
                if rec.key not in writer.existing:
                    writer.write(rec)
                    added += 1
        total = len(writer.existing)
    return added, total

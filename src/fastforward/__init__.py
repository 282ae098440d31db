"""fastforward: decode many tokens per forward pass, measured honestly against a fast AR baseline.

The public names below are imported on first use (PEP 562), so ``import fastforward.errors`` -- and with it
every CLI argument check, ``--help`` and ``--version`` -- does not pay for importing torch.
"""

from __future__ import annotations

import importlib
from typing import Any

from fastforward.errors import FastForwardError

__all__ = ["Decoder", "DecodeStats", "FastForwardError", "GenerationConfig", "GenerationResult"]
__version__ = "0.1.0"

_LAZY = {
    "Decoder": "fastforward.core.decoder",
    "GenerationConfig": "fastforward.core.decoder",
    "GenerationResult": "fastforward.core.decoder",
    "DecodeStats": "fastforward.core.stats",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'fastforward' has no attribute {name!r}")

"""Model loading: registry names, local HF directories and .gguf files, all converted once and cached.

``load_model`` and ``LoadedModel`` are imported on first use (PEP 562): the registry is read by argument
checks that must not pay for importing torch."""

from __future__ import annotations

from typing import Any

from fastforward.models.registry import REGISTRY, ModelSpec

__all__ = ["REGISTRY", "LoadedModel", "ModelSpec", "load_model"]


def __getattr__(name: str) -> Any:
    if name in ("LoadedModel", "load_model"):
        from fastforward.models import loading

        return getattr(loading, name)
    raise AttributeError(f"module 'fastforward.models' has no attribute {name!r}")

"""Model loading: registry names, local HF directories and .gguf files, all converted once and cached."""

from fastforward.models.loading import LoadedModel, load_model
from fastforward.models.registry import REGISTRY, ModelSpec

__all__ = ["REGISTRY", "LoadedModel", "ModelSpec", "load_model"]

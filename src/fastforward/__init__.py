"""fastforward: decode many tokens per forward pass, measured honestly against a fast AR baseline."""

from fastforward.core.decoder import Decoder, GenerationConfig, GenerationResult
from fastforward.core.stats import DecodeStats
from fastforward.errors import FastForwardError

__all__ = ["Decoder", "DecodeStats", "FastForwardError", "GenerationConfig", "GenerationResult"]
__version__ = "0.1.0"

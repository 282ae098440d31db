"""Quality scoring of benchmark outputs: GSM8K accuracy and HumanEval pass@1 (sandboxed subprocess)."""

from fastforward.eval.score import score_result

__all__ = ["score_result"]

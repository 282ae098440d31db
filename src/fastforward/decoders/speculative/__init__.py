"""Speculative decoding: a draft proposes, the target verifies in one forward, one loop commits.

``build(name, target, draft, options)`` maps the registry's method names to a drafter and a verifier:

| method | drafter | verifier |
|---|---|---|
| sd | draft model (same tokenizer) | exact: greedy equality, or rejection sampling when sampling |
| sd-sample | draft model | rejection sampling (refuses temperature 0) |
| pld | prompt lookup n-grams | exact |
| layerskip | the target's first ``layers`` layers | exact |
| typical | draft model | typical acceptance (LOSSY) |
| consultant | draft model | Consultant Decoding EMA-NLL rule (LOSSY) |

Options (``--opt key=value``; the bench hands the same options to every method, so each method accepts all
of these and uses its own): gamma (5), adaptive (false), gamma_max (12), ngram_max (3), ngram_min (1),
layers (half the target's layers), draft_stop (0: off; else a
draft model stops its chain after a token it gives probability < draft_stop), eps (consultant 2.0, typical 0.09), beta (0.2), alpha (0.3).
"""

from __future__ import annotations

from fastforward.decoders.speculative.drafters import ModelDrafter, PromptLookupDrafter, shallow_view
from fastforward.decoders.speculative.engine import (
    SpecConfig,
    SpeculativeDecoder,
    consultant_verifier,
    exact_verifier,
    typical_verifier,
)
from fastforward.errors import FastForwardError

OPTIONS = (
    "draft_stop",
    "gamma",
    "adaptive",
    "gamma_max",
    "ngram_max",
    "ngram_min",
    "layers",
    "eps",
    "beta",
    "alpha",
)
DRAFT_MODEL_METHODS = ("sd", "sd-sample", "typical", "consultant")


def build(name: str, target, draft, options: dict) -> SpeculativeDecoder:
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise FastForwardError(
            f"method '{name}': unknown option(s) {', '.join(unknown)}; known: {', '.join(OPTIONS)}"
        )
    gamma = _int(options, "gamma", 5)
    spec = SpecConfig(
        gamma=gamma,
        adaptive=bool(options.get("adaptive", False)),
        gamma_max=_int(options, "gamma_max", max(12, gamma)),
        require_sampling=name == "sd-sample",
    )
    spec.validate()
    if name in DRAFT_MODEL_METHODS:
        if draft is None:
            raise FastForwardError(f"method '{name}' needs a draft model: pass --draft NAME")
        from fastforward.decoders.speculative_checks import check_same_tokenizer

        if (target.tokenizer is None) != (draft.tokenizer is None):
            raise FastForwardError(f"'{target.name}' and '{draft.name}': only one has a tokenizer")
        if target.tokenizer is not None:  # both None: ids-only test models, nothing to compare
            check_same_tokenizer(target, draft)
        drafter = ModelDrafter(draft.model, float(options.get("draft_stop", 0.0)))
    elif name == "pld":
        drafter = PromptLookupDrafter(_int(options, "ngram_max", 3), _int(options, "ngram_min", 1))
    elif name == "layerskip":
        n_layers = len(target.model.model.layers) if hasattr(target.model, "model") else 2
        view = shallow_view(target.model, _int(options, "layers", n_layers // 2))
        drafter = ModelDrafter(view, float(options.get("draft_stop", 0.0)))
    else:
        raise FastForwardError(f"unknown speculative method '{name}'")
    if name == "consultant":
        verifier = consultant_verifier(float(options.get("eps", 2.0)), float(options.get("beta", 0.2)))
    elif name == "typical":
        verifier = typical_verifier(float(options.get("eps", 0.09)), float(options.get("alpha", 0.3)))
    else:
        verifier = exact_verifier
    return SpeculativeDecoder(
        target.model, drafter, verifier, spec, name, lossless=name not in ("typical", "consultant")
    )


def _int(options: dict, key: str, default: int) -> int:
    value = options.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
        raise FastForwardError(f"option {key} must be an integer, got {value!r}")
    return int(value)

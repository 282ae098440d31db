"""The one option parser: types from the config dataclass, ranges and choices from its fields, one-line errors."""

from __future__ import annotations

import pytest

from fastforward.core.acceptance import accept_chain, accept_tree_typical, common_prefix, fan_parents
from fastforward.core.options import build_config, parse_options
from fastforward.decoders.jacobi import JacobiConfig
from fastforward.decoders.lookahead import ALIASES, LookaheadConfig
from fastforward.decoders.speculative import SpecOptions
from fastforward.errors import FastForwardError


def test_values_are_coerced_to_the_field_types() -> None:
    cfg = build_config(JacobiConfig, parse_options(["block_size=8", "init=pad", "record=true"]), "jacobi")
    assert (cfg.block_size, cfg.init, cfg.record) == (8, "pad", True)
    spec = build_config(SpecOptions, {"eps": 2, "gamma": 4.0}, "sd")  # an int where a float goes, 4.0 -> 4
    assert spec.eps == 2.0 and isinstance(spec.eps, float) and spec.gamma == 4 and isinstance(spec.gamma, int)
    assert build_config(LookaheadConfig, {"W": 3, "G": 2}, "lookahead", ALIASES).window == 3


@pytest.mark.parametrize(
    ("cls", "options", "message"),
    [
        (JacobiConfig, {"blocksize": 4}, "jacobi: unknown option 'blocksize'; known: block_size, gate, init"),
        (JacobiConfig, {"block_size": 0}, "jacobi: option block_size must be an integer >= 1, got 0"),
        (JacobiConfig, {"block_size": 2.5}, "block_size must be an integer"),
        (JacobiConfig, {"block_size": True}, "block_size must be an integer"),
        (JacobiConfig, {"init": "zeros"}, "init must be one of random, repeat, pad"),
        (JacobiConfig, {"record": 1}, "record must be true or false"),
        (SpecOptions, {"draft_stop": 1.5}, r"draft_stop must be a number in \[0.0, 1.0\]"),
        (SpecOptions, {"ngram_min": 4, "ngram_max": 2}, "ngram_min <= ngram_max"),
        (LookaheadConfig, {"ngram": 1}, "ngram must be an integer >= 2"),
    ],
)
def test_bad_options_are_one_line_errors(cls, options, message) -> None:
    with pytest.raises(FastForwardError, match=message) as err:
        build_config(cls, options, {JacobiConfig: "jacobi", SpecOptions: "sd"}.get(cls, "lookahead"))
    assert "\n" not in str(err.value)


def test_a_config_handed_over_directly_is_checked_too(tiny) -> None:
    from fastforward.decoders.jacobi import JacobiDecoder

    with pytest.raises(FastForwardError, match="block_size must be an integer >= 1"):
        JacobiDecoder(tiny.model, JacobiConfig(block_size=0))


def test_pairs_must_be_key_value() -> None:
    with pytest.raises(FastForwardError, match="key=value"):
        parse_options(["gamma"])


def test_chain_acceptance_and_typical_trees_on_hand_made_inputs() -> None:
    import torch

    assert common_prefix([1, 2, 3], [1, 2, 4]) == 2
    assert accept_chain([4, 5, 6], [4, 5, 7, 9]) == 2
    assert accept_chain([], [3]) == 0
    assert fan_parents([2, 1]) == [-1, 0, 1, 0]
    probs = torch.tensor([[0.1, 0.9, 0.0], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0], [0.5, 0.5, 0.0]])
    # node 1 (token 1) under the root: p = 0.9 accepted; its child (token 2): p = 1.0 accepted; node 3
    # (token 0) under the root: p = 0.1 > threshold min(0.09, 0.3 e^-H) -> accepted but shallower
    assert accept_tree_typical([0, 1, 2, 0], fan_parents([2, 1]), probs) == [0, 1, 2]
    assert accept_tree_typical([0], [-1], probs[:1]) == [0]


def test_every_result_names_the_instruction_set() -> None:
    """Machines of one kind differ (AVX-512 + bf16 vs AVX2); the hardware line must say which ran."""
    import torch

    from fastforward.hardware import cpu_isa, describe

    assert cpu_isa().startswith(torch.backends.cpu.get_cpu_capability())
    assert f"ISA {cpu_isa()}" in describe()

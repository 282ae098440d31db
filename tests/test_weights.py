"""``--weights int8|int4``: the target itself runs through torch's weight-only CPU kernels. That is a
different (smaller, rounded) model, so the reference is its own greedy AR: every lossless method must give
exactly those tokens, eagerly and through the compiled forwards, on tiny models and on real SmolLM2 prompts
in fp32. What the choice excludes (another kernel path, a GPU, a float32 head) is a one-line error."""

from __future__ import annotations

import pytest

from fastforward.core.engine import compile_forward
from fastforward.decoders.registry import build_decoder
from fastforward.errors import FastForwardError
from fastforward.models.loading import LoadedModel, load_model, weights_of
from fastforward.models.quantize import layer_kinds, quantized_copy
from fastforward.models.weights import weights_error

from .conftest import greedy_ar, greedy_config, make_tiny

PROMPT = [5, 17, 33, 2, 90, 41, 7, 64, 12, 3, 28] * 3  # repetitive: pld and lookahead find guesses
METHODS = ["pld", "lookahead", "jacobi"]


def _quantized_tiny(bits: int) -> LoadedModel:
    lm = make_tiny("llama", vocab=96, seed=5)
    lm.model = quantized_copy(lm.model, bits)
    return lm


@pytest.mark.parametrize("bits", [8, 4])
def test_methods_on_a_quantized_target_equal_its_own_greedy_ar(bits) -> None:
    lm = _quantized_tiny(bits)
    ref = greedy_ar(lm.model, PROMPT, 40)
    for method in METHODS:
        assert build_decoder(method, lm).generate(PROMPT, greedy_config(40)).tokens == ref, method


def test_a_quantized_target_compiles_to_the_same_tokens() -> None:
    eager, fast = _quantized_tiny(8), _quantized_tiny(8)
    compile_forward(fast.model, capacity=256, mode=None)
    ref = greedy_ar(eager.model, PROMPT, 40)
    for method in ("ar", "pld"):
        out = build_decoder(method, fast).generate(PROMPT, greedy_config(40))
        assert out.tokens == ref, method
        assert out.stats.extras["forward"] == "compiled"


@pytest.mark.parametrize(
    ("weights", "path", "device", "logits32", "fragment"),
    [
        ("int8", "prepacked", "cpu", False, "takes no kernel path"),
        ("int4", "default", "cuda", False, "runs torch's CPU kernels"),
        ("int8", "default", "cpu", True, "leave out --fp32-logits"),
        ("int3", "default", "cpu", False, "unknown --weights 'int3'"),
    ],
)
def test_what_quantized_weights_exclude_is_one_line(weights, path, device, logits32, fragment) -> None:
    problem = weights_error(weights, path, device, logits32)
    assert problem is not None and fragment in problem and "\n" not in problem
    with pytest.raises(FastForwardError, match=fragment.replace("'", ".")):
        load_model("smollm2-135m", "float32", device, path=path, logits32=logits32, weights=weights)


def test_full_and_auto_are_no_conflict() -> None:
    assert weights_error("full", "prepacked", "cuda", True) is None
    assert weights_error("int8", "auto", "cpu", False) is None


@pytest.fixture(scope="module")
def smollm2_int8() -> LoadedModel:
    return load_model("smollm2-135m", "float32", threads=2, weights="int8")


def test_load_model_quantizes_every_linear_and_keeps_the_eos_ids(smollm2_int8, smollm2) -> None:
    kinds = layer_kinds(smollm2_int8.model)
    assert kinds.get("float", 0) == 0 and kinds["int8"] == 30 * 7 + 1  # 30 blocks x 7 projections + LM head
    assert weights_of(smollm2_int8.model) == "int8" and smollm2_int8.weights == "int8"
    assert smollm2_int8.eos_token_ids == smollm2.eos_token_ids


@pytest.mark.parametrize("method", ["pld", "lookahead"])
def test_int8_smollm2_methods_equal_its_own_greedy_ar_on_real_prompts(
    smollm2_int8, real_prompts, method
) -> None:
    for prompt in real_prompts[::8]:  # one GSM8K held-out, one MT-bench, one HumanEval prompt
        ref = greedy_ar(smollm2_int8.model, prompt, 32)
        out = build_decoder(method, smollm2_int8).generate(prompt, greedy_config(32))
        assert out.tokens == ref

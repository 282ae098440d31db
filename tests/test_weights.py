"""``--weights int8|int4|w8a8``: the target itself runs through torch's int8/int4 CPU kernels, a different
(smaller, rounded) model whose reference is its own greedy AR.

What holds, and is tested: each kernel gives a row the same bits whatever rows share the call; our AR on a
quantized SmolLM2 equals that model's own ``generate()``; the compiled forward decodes what the eager one
does; the files and tables say which weights ran; what the choice excludes (another kernel path, a GPU, a
float32 head) is a one-line error. What does not hold: multi-token methods are not token-for-token equal to
the quantized AR. The kernels take bf16 activations, so the last-bit differences between a k-token and a
1-token attention can round to a different bf16 input of the next layer (measured on SmolLM2: the first
difference is layer 1's o_proj, 0.016; logits up to 0.25 apart), and pld matched AR on 2 of 6 MT-bench
generations of 128 tokens. So the tables label such runs bf16-class (``bench.report.QUANT_NOTE``).

W8A8 (``--weights w8a8``) holds more: its int8 x int8 products are exact and its activations are rounded per
token, so with attention computed row by row (``core.compiled.rowwise_attention``) a token's logits have the
same bits at every width and every method decodes its AR token for token (tested on real SmolLM2 prompts)."""

from __future__ import annotations

import pytest
import torch

from fastforward.bench.report import QUANT_NOTE, W8A8_NOTE, markdown_table
from fastforward.core.aot import serial_row_chunk
from fastforward.core.compiled import ROWWISE, grouped_attention, rowwise_attention
from fastforward.core.engine import compile_forward
from fastforward.core.int8_gemm import vnni_usable
from fastforward.decoders.registry import build_decoder
from fastforward.errors import FastForwardError
from fastforward.models.loading import LoadedModel, load_model, weights_of
from fastforward.models.quantize import layer_kinds, quantize_linear, quantize_rows, quantized_copy
from fastforward.models.weights import weights_error

from .conftest import (
    TEST_THREADS,
    assert_wider_forwards_keep_step_bits,
    greedy_ar,
    greedy_config,
    make_tiny,
)

PROMPT = [5, 17, 33, 2, 90, 41, 7, 64, 12, 3, 28] * 3  # repetitive: pld finds guesses


def _quantized_tiny(bits: int, activations: bool = False) -> LoadedModel:
    lm = make_tiny("llama", vocab=96, seed=5)
    lm.model = quantized_copy(lm.model, bits, activations=activations)
    return lm


@pytest.mark.parametrize(("bits", "activations"), [(8, False), (4, False), (8, True)])
def test_each_row_gets_the_same_bits_whatever_rows_share_the_kernel(bits, activations) -> None:
    """The property that leaves attention as the only width-dependent part of a quantized forward."""
    torch.manual_seed(0)
    layer = quantize_linear(torch.nn.Linear(256, 128), bits, 64, torch.bfloat16, activations)
    x = torch.randn(8, 256)
    with torch.inference_mode():
        together = layer(x)
        alone = torch.cat([layer(x[i : i + 1]) for i in range(8)])
    assert torch.equal(together, alone)


def test_int8_activations_are_rounded_per_row() -> None:
    torch.manual_seed(0)
    x = torch.randn(6, 64)
    x[2] *= 1000  # one loud token must not coarsen the others' rounding
    q, scale = quantize_rows(x)
    alone, alone_scale = quantize_rows(x[3:4])
    assert torch.equal(q[3:4], alone) and torch.equal(scale[3:4], alone_scale)
    assert q.dtype == torch.int8 and torch.equal(q.abs().amax(1), torch.full((6,), 127, dtype=torch.int8))
    assert ((q.float() * scale - x).abs() <= scale / 2 + 1e-6).all()


@pytest.mark.xfail(
    not vnni_usable(),
    strict=True,
    reason="known bug (session 60): without VNNI (an AVX2-only CPU, or ONEDNN_MAX_CPU_ISA=AVX2) torch._int_mm "
    "saturates pairs of int8 products in int16 (37415 off in a 5x128x64 product), so --weights w8a8 is refused "
    "there (test_w8a8_without_vnni_is_refused_in_one_line_before_loading)",
)
def test_w8a8_linear_is_close_to_the_float_layer() -> None:
    torch.manual_seed(0)
    linear = torch.nn.Linear(128, 64)
    x = torch.randn(5, 128)
    with torch.inference_mode():
        err = (quantize_linear(linear, 8, activations=True)(x) - linear(x)).abs().max()
    assert 0 < err < 0.05


def _causal(rows: int, slots: int) -> torch.Tensor:
    """[1, 1, rows, slots]: row i sees the slots up to its own, the last ``rows`` being the fed ones."""
    return torch.arange(slots)[None, :] <= torch.arange(slots - rows, slots)[:, None]


def test_rowwise_attention_gives_a_row_the_same_bits_alone_or_in_a_wider_forward() -> None:
    """A k-token chain over an eager cache (n + k slots) against each of its tokens as a 1-token step over
    n + i + 1 slots, as greedy AR feeds them: the same bits, and grouped_attention's values."""
    torch.manual_seed(0)
    n, k, d = 37, 6, 16
    query, key, value = torch.randn(1, 6, k, d), torch.randn(1, 2, n + k, d), torch.randn(1, 2, n + k, d)
    wide = rowwise_attention(query, key, value, _causal(k, n + k)[None, None])
    assert torch.allclose(
        wide, grouped_attention(query, key, value, _causal(k, n + k)[None, None]), atol=1e-5
    )
    for i in range(k):
        s = n + i + 1
        alone = rowwise_attention(
            query[:, :, i : i + 1], key[:, :, :s], value[:, :, :s], _causal(1, s)[None, None]
        )
        assert torch.equal(wide[:, :, i : i + 1], alone), i


def test_rowwise_attention_gives_a_tree_node_its_ar_steps_bits() -> None:
    """A tree forward (node 3's ancestors are nodes 0 and 2, node 1 a sibling it must not see) against node
    3 as AR computes it: its ancestors' keys right after the prefix."""
    torch.manual_seed(1)
    n, d = 21, 16
    query, key, value = torch.randn(1, 4, 4, d), torch.randn(1, 2, n + 4, d), torch.randn(1, 2, n + 4, d)
    parents = [-1, 0, 0, 2]
    mask = torch.zeros(4, n + 4, dtype=torch.bool)
    mask[:, :n] = True
    for i in range(4):
        j = i
        while j >= 0:
            mask[i, n + j] = True
            j = parents[j]
    tree = rowwise_attention(query, key, value, mask[None, None])
    path = list(range(n)) + [
        n,
        n + 2,
        n + 3,
    ]  # the prefix, then node 3's ancestors and itself, as AR has them
    ar = rowwise_attention(
        query[:, :, 3:4], key[:, :, path], value[:, :, path], _causal(1, len(path))[None, None]
    )
    assert torch.equal(tree[:, :, 3:4], ar)


def test_compiled_rowwise_attention_gives_a_tree_node_its_ar_steps_bits() -> None:
    """Compiled (no gather), SmolLM2's attention shapes over a 512-slot cache: a row whose siblings sit
    between it and its parent, 1-15 of them, so its own slot falls in each vector lane, against its AR step
    (itself right after its parent). Failed 15 of 15 when the softmax's denominator was summed across
    vector lanes (session 53's first try: SmolLM2 W8A8's suffix then left its AR on 1-4 of 8 prompts)."""
    torch.manual_seed(2)
    q, n, d, s = 4, 300, 64, 512  # rows, prefix, head dim, fixed cache slots
    attend = torch.compile(rowwise_attention, dynamic=False)
    query, key, value = torch.randn(1, 9, q, d), torch.randn(1, 3, s, d), torch.randn(1, 3, s, d)
    with torch.no_grad():
        ar = attend(query, key, value, (torch.arange(s) <= n + 1).repeat(q, 1)[None, None])
        for between in range(1, 16):
            k2, v2 = torch.randn(1, 3, s, d), torch.randn(1, 3, s, d)  # siblings' slots: anything
            k2[:, :, : n + 1], v2[:, :, : n + 1] = key[:, :, : n + 1], value[:, :, : n + 1]
            k2[:, :, n + 1 + between], v2[:, :, n + 1 + between] = key[:, :, n + 1], value[:, :, n + 1]
            mask = (torch.arange(s) <= n).repeat(q, 1)
            mask[:, n + 1 + between] = True
            assert torch.equal(attend(query, k2, v2, mask[None, None]), ar), between


def test_a_w8a8_model_runs_rowwise_attention_and_every_method_decodes_its_ar() -> None:
    lm = _quantized_tiny(8, activations=True)
    assert getattr(lm.model.config, ROWWISE) and layer_kinds(lm.model) == {"w8a8": 2 * 7 + 1}
    ref = greedy_ar(lm.model, PROMPT, 40)
    for method in ("pld", "suffix", "jacobi", "lookahead"):
        assert build_decoder(method, lm).generate(PROMPT, greedy_config(40)).tokens == ref, method


@pytest.fixture(scope="module")
def smollm2_w8a8() -> LoadedModel:
    if not vnni_usable():
        pytest.skip(
            "--weights w8a8 is refused without VNNI (test_w8a8_without_vnni_is_refused_in_one_line...)"
        )
    return load_model("smollm2-135m", "float32", threads=TEST_THREADS, weights="w8a8")


def test_chains_and_trees_on_w8a8_smollm2_decode_its_own_ar_token_for_token(
    smollm2_w8a8, real_prompts
) -> None:
    """W8A8's claim: lossless with respect to its own greedy AR. Without row-by-row attention suffix matched
    AR on 1 of 3 GSM8K prompts (64 tokens) and recycle on none."""
    eos = smollm2_w8a8.eos_token_ids
    for prompt in (real_prompts[0], real_prompts[16]):  # a GSM8K held-out and a HumanEval prompt
        ref = greedy_ar(smollm2_w8a8.model, prompt, 48, eos)
        for method in ("pld", "suffix", "recycle"):
            out = build_decoder(method, smollm2_w8a8).generate(prompt, greedy_config(48, eos))
            assert out.tokens == ref, method


@pytest.mark.slow  # 31 s of compiling on a 2-core AVX2 CPU: the suite's time budget
def test_a_quantized_target_compiles_to_the_same_tokens() -> None:
    eager, fast = _quantized_tiny(8), _quantized_tiny(8)
    compile_forward(fast.model, capacity=256, mode=None)
    ref = greedy_ar(eager.model, PROMPT, 40)
    for method in ("ar", "pld"):
        out = build_decoder(method, fast).generate(PROMPT, greedy_config(40))
        assert out.tokens == ref, method
        assert out.stats.extras["forward"] == "compiled"


def test_packages_never_split_a_row_of_hidden_states_across_threads() -> None:
    wide = make_tiny("llama", vocab=96, seed=5).model
    wide.config.hidden_size = 1536
    assert serial_row_chunk(wide) > 1536  # a 1-token norm over 1536 values is not cut into per-thread sums
    assert serial_row_chunk(make_tiny("llama").model) == 512  # inductor's own where rows are small


@pytest.mark.slow  # ~1 min of compiling two graphs
def test_compiled_w8a8_gives_a_token_its_1_token_bits_in_a_wider_forward() -> None:
    """A hidden size above 2 x 512: inductor's default split a 1-token graph's norm over the two threads and
    the 4-token graph's did not, so a token's logits differed in the last bits (the Qwen2.5-1.5B's by up to
    1.08 after int8 rounding, session 52). Fails with ``cpp.min_chunk_size`` at its default. A tree node is
    checked against its AR step too; the lane order of attention's sums is caught by the compiled attention
    test above, not here (at these shapes inductor emitted the sums in slot order either way)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(3)
    cfg = LlamaConfig(
        vocab_size=96, hidden_size=1088, intermediate_size=256, num_hidden_layers=1, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=512, tie_word_embeddings=False,
    )  # fmt: skip
    model = quantized_copy(LlamaForCausalLM(cfg).eval().requires_grad_(False), 8, activations=True)
    compile_forward(model, capacity=256, mode=None, widths=(1, 4))
    assert_wider_forwards_keep_step_bits(model, PROMPT)


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
    problem = weights_error(weights, path, device, logits32, vnni=True)
    assert problem is not None and fragment in problem and "\n" not in problem
    with pytest.raises(FastForwardError, match=fragment.replace("'", ".")):
        load_model("smollm2-135m", "float32", device, path=path, logits32=logits32, weights=weights)


def test_w8a8_without_vnni_is_refused_in_one_line_before_loading(monkeypatch) -> None:
    """Without VNNI torch's int8 GEMM saturates (the strict xfail above), so W8A8 would decode a damaged model:
    refused, by the CLI's checks and by load_model, rather than run or merely logged."""
    problem = weights_error("w8a8", "default", "cpu", False, vnni=False)
    assert (
        problem is not None
        and "needs VNNI" in problem
        and "--weights int8" in problem
        and "\n" not in problem
    )
    assert weights_error("w8a8", "default", "cpu", False, vnni=True) is None
    assert weights_error("int8", "default", "cpu", False, vnni=False) is None  # weight-only: no int8 GEMM
    monkeypatch.setattr("fastforward.core.int8_gemm.vnni_usable", lambda: False)  # asked when not passed
    assert "needs VNNI" in weights_error("w8a8", "default", "cpu", False)
    with pytest.raises(FastForwardError, match="needs VNNI"):
        load_model("smollm2-135m", "float32", weights="w8a8")


def test_full_and_auto_are_no_conflict() -> None:
    assert weights_error("full", "prepacked", "cuda", True, vnni=False) is None
    assert weights_error("int8", "auto", "cpu", False, vnni=False) is None


@pytest.fixture(scope="module")
def smollm2_int8() -> LoadedModel:
    return load_model("smollm2-135m", "float32", threads=TEST_THREADS, weights="int8")


def test_load_model_quantizes_every_linear_and_keeps_the_eos_ids(smollm2_int8, smollm2) -> None:
    kinds = layer_kinds(smollm2_int8.model)
    assert kinds.get("float", 0) == 0 and kinds["int8"] == 30 * 7 + 1  # 30 blocks x 7 projections + LM head
    assert weights_of(smollm2_int8.model) == "int8" and smollm2_int8.weights == "int8"
    assert smollm2_int8.eos_token_ids == smollm2.eos_token_ids


def test_our_ar_on_int8_smollm2_equals_its_own_generate(smollm2_int8, real_prompts) -> None:
    for prompt in (real_prompts[0], real_prompts[8]):  # a GSM8K held-out and an MT-bench prompt
        ids = torch.tensor([prompt])
        with torch.inference_mode():
            hf = smollm2_int8.model.generate(
                ids, max_new_tokens=32, do_sample=False, eos_token_id=list(smollm2_int8.eos_token_ids)
            )
        assert (
            greedy_ar(smollm2_int8.model, prompt, 32, smollm2_int8.eos_token_ids)
            == hf[0, len(prompt) :].tolist()
        )


def test_a_quantized_bench_table_says_its_agreement_is_bf16_class() -> None:
    method = {
        "tokens_per_s": 30.0, "speedup_vs_ar": 1.0, "mean_accepted_tokens": 1.3, "identical_to_ar": 0.5,
        "samples": 2, "lossless": True, "ar_step_share": 0.2,
    }  # fmt: skip
    result = {
        "model": "m", "dtype": "float32", "weights": "int8", "dataset": "mtbench", "max_new_tokens": 8,
        "hardware": "cpu", "methods": {"ar": {**method, "identical_to_ar": 1.0}, "pld": method},
    }  # fmt: skip
    table = markdown_table(result)
    assert "int8 weights" in table and "bf16-class" in table and "must reach 100%" not in table
    assert QUANT_NOTE.format(weights="int8") in table
    w8a8 = markdown_table({**result, "weights": "w8a8"})
    assert "w8a8 weights" in w8a8 and "bf16-class" not in w8a8 and "exact vs its own AR" in w8a8
    assert W8A8_NOTE in w8a8 and "must reach 100%" in w8a8
    # compiled: exact only from packages that keep each row's sums on one thread (session 53 on)
    before = markdown_table({**result, "weights": "w8a8", "engine": "compiled"})
    assert "bf16-class" in before and W8A8_NOTE not in before
    serial = markdown_table({**result, "weights": "w8a8", "engine": "compiled", "serial_rows": True})
    assert "bf16-class" not in serial and W8A8_NOTE in serial

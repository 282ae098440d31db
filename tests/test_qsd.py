"""qsd: the target's own weights, weight-only int8 / int4, draft for the full-precision target.

The quantized layers approximate their float originals (int8 tightly, int4 loosely); the quantized copy
shares every non-Linear tensor with the target and leaves it untouched; and whatever the draft proposes,
the exact verifier keeps the output equal to greedy AR (tiny models, and real SmolLM2 prompts in fp32)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from fastforward.core import int8_gemm
from fastforward.core.decoder import GenerationConfig
from fastforward.core.int8_gemm import vnni_usable
from fastforward.decoders.ar import ARDecoder
from fastforward.decoders.registry import build_decoder
from fastforward.decoders.speculative import draft_models
from fastforward.errors import FastForwardError
from fastforward.models import quantize
from fastforward.models.quantize import Int4Linear, Int8Linear, layer_kinds, quantized_copy

from .conftest import greedy_config, make_tiny

NO_VNNI = "act8 is refused without VNNI (test_act8_without_vnni_is_a_one_line_error)"

N_TOKENS = 24


def _rel_error(layer: nn.Module, linear: nn.Linear, x: torch.Tensor) -> float:
    with torch.inference_mode():
        ref, out = linear(x.float()), layer(x)
    assert out.dtype == x.dtype and out.shape == ref.shape
    return float((out.float() - ref).norm() / ref.norm())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_int8_linear_is_close_to_the_float_linear(dtype):
    torch.manual_seed(0)
    linear = nn.Linear(256, 96)
    layer = Int8Linear(linear)
    assert layer.qweight.dtype == torch.int8 and layer.bias is linear.bias  # shared, not copied
    assert _rel_error(layer, linear, torch.randn(2, 5, 256, dtype=dtype)) < 0.01


@pytest.mark.parametrize("group_size", [32, 64, 128, 256])
def test_int4_linear_is_close_to_the_float_linear(group_size):
    torch.manual_seed(0)
    linear = nn.Linear(256, 96)
    layer = Int4Linear(linear, group_size)
    assert layer.scales_and_zeros.shape == (256 // group_size, 96, 2) and layer.bias is linear.bias
    for dtype in (torch.float32, torch.bfloat16):
        assert _rel_error(layer, linear, torch.randn(3, 256, dtype=dtype)) < 0.1


def test_int4_packs_in_row_chunks_like_in_one_piece(monkeypatch):
    torch.manual_seed(0)
    linear = nn.Linear(128, 256, bias=False)
    whole = Int4Linear(linear, 64)
    monkeypatch.setattr(quantize, "_ROWS", 64)
    chunked = Int4Linear(linear, 64)
    assert torch.equal(whole.qweight, chunked.qweight)
    assert torch.equal(whole.scales_and_zeros, chunked.scales_and_zeros)


def test_int4_group_shrinks_to_fit_and_falls_back_to_int8():
    layers = nn.ModuleDict(
        {
            "fits": nn.Linear(256, 32),  # 128 divides 256
            "shrinks": nn.Linear(192, 32),  # 128 does not divide 192: 64 does
            "odd_rows": nn.Linear(256, 24),  # out_features % 16 != 0: int8
            "odd_cols": nn.Linear(36, 32),  # no int4 group divides 36: int8
        }
    )
    kinds = {name: layer_kinds(quantize.quantize_linear(lin, 4, 128)) for name, lin in layers.items()}
    assert kinds == {
        "fits": {"int4-g128": 1},
        "shrinks": {"int4-g64": 1},
        "odd_rows": {"int8": 1},
        "odd_cols": {"int8": 1},
    }
    with pytest.raises(FastForwardError, match="in_features=30") as err:
        Int8Linear(nn.Linear(30, 32))  # the int8 kernel needs a multiple of 4
    assert "\n" not in str(err.value)
    with pytest.raises(FastForwardError, match="group_size") as err:
        Int4Linear(nn.Linear(192, 32), 128)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("tied", [False, True])
def test_quantized_copy_shares_the_targets_tensors_and_leaves_it_unchanged(tied):
    target = make_tiny(arch="qwen2", seed=0).model  # qwen2: q/k/v carry biases
    if tied:
        target.lm_head.weight = target.model.embed_tokens.weight
    before = {k: v.clone() for k, v in target.state_dict().items()}
    ids = torch.tensor([[1, 2, 3, 4, 5, 6]])
    with torch.inference_mode():
        logits = target(input_ids=ids).logits
        qcopy = quantized_copy(target, 8)
        assert torch.equal(target(input_ids=ids).logits, logits)
    assert all(torch.equal(v, target.state_dict()[k]) for k, v in before.items())
    assert type(qcopy) is type(target) and qcopy is not target
    assert qcopy.model.embed_tokens.weight is target.model.embed_tokens.weight
    assert qcopy.model.norm is target.model.norm and qcopy.model.rotary_emb is target.model.rotary_emb
    attn, ref_attn = qcopy.model.layers[0].self_attn, target.model.layers[0].self_attn
    assert attn.q_proj.bias is ref_attn.q_proj.bias
    assert qcopy.model.layers[0].input_layernorm is target.model.layers[0].input_layernorm
    assert isinstance(qcopy.lm_head, Int8Linear) and isinstance(target.lm_head, nn.Linear)
    assert target.lm_head.weight.dtype == torch.float32  # the target's head is still the float one
    assert not any(isinstance(m, nn.Linear) for m in qcopy.modules())
    assert layer_kinds(qcopy) == {"int8": 15}
    floats = {p.data_ptr() for p in qcopy.parameters() if p.is_floating_point()}
    assert floats <= {p.data_ptr() for p in target.parameters()}  # no float tensor of its own
    with torch.inference_mode():
        out = qcopy(input_ids=ids).logits
    assert out.dtype == logits.dtype and float((out - logits).norm() / logits.norm()) < 0.05


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize(
    "options",
    [
        {"bits": 8},
        {"bits": 4, "group_size": 32},
        {"bits": 4},
        pytest.param({"bits": 8, "act8": True}, marks=pytest.mark.skipif(not vnni_usable(), reason=NO_VNNI)),
    ],
)
def test_qsd_equals_greedy_ar_on_tiny_models(arch, options):
    target = make_tiny(arch=arch, seed=0)
    dec = build_decoder("qsd", target, None, {"gamma": 4, "gamma_auto": False, **options})
    assert dec.lossless and not dec.needs_draft and dec.in_all
    ar = ARDecoder(target.model)
    accepted = 0
    for prompt in ([1, 2, 3], [7] * 5, list(range(10, 40))):
        cfg = greedy_config(20)
        ref = ar.generate(prompt, cfg).tokens
        out = dec.generate(prompt, cfg)
        assert out.tokens == ref
        accepted += out.stats.extras["spec_accepted"]
    assert accepted > 0


def test_qsd_drafts_on_the_target_s_cache_and_never_feeds_its_copy_the_prompt():
    """The copy is quantized from the target itself (same embeddings and norms, same key/value dtype), so it
    drafts on the target's cache: each draft forward feeds one token, the anchor or its own last guess; no
    prefill of the prompt, no catch-up over tokens the target committed alone. The target's next forward
    writes over the guesses' entries: the tokens are AR's."""
    target = make_tiny("llama", vocab=96, seed=4)
    prompt = [5, 17, 33, 2, 90, 41, 7, 64, 12, 3, 28] * 3
    cfg = greedy_config(30)
    ref = ARDecoder(target.model).generate(prompt, cfg).tokens
    # the copy's own feeding: no lookup chain stands in for it
    opts = {"gamma": 3, "gamma_auto": False, "bits": 8, "lookup_first": False}
    dec = build_decoder("qsd", target, None, opts)
    assert dec.drafter.shared_layers == len(target.model.model.layers)
    (qcopy,) = draft_models(dec.drafter)
    fed: list[int] = []
    hook = qcopy.register_forward_pre_hook(
        lambda _m, args, kw: fed.append(kw["input_ids"].shape[1]), with_kwargs=True
    )
    try:
        for _ in range(2):  # a second request too: nothing of the first is left in the draft
            out = dec.generate(prompt, cfg)
            assert out.tokens == ref and out.stats.extras["spec_accepted"] > 0
    finally:
        hook.remove()
    assert fed and set(fed) == {1}


def test_qsd_stops_at_eos_and_max_new_tokens_like_ar():
    target = make_tiny(seed=0)
    full = ARDecoder(target.model).generate([4, 5, 6], greedy_config(15)).tokens
    eos = (full[6],)
    dec = build_decoder("qsd", target, None, {"gamma": 5, "bits": 4, "group_size": 32})
    assert dec.generate([4, 5, 6], greedy_config(15, eos)).tokens == full[: full.index(eos[0]) + 1]
    for n in (1, 2, 7, 15):
        assert dec.generate([4, 5, 6], greedy_config(n)).tokens == full[:n]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"bits": 5}, "qsd: option bits must be one of 4, 8, got 5"),
        ({"bits": "four"}, "qsd: option bits must be one of 4, 8"),
        ({"group_size": 100}, "qsd: option group_size must be one of 32, 64, 128, 256, got 100"),
        ({"group": 64}, "qsd: unknown option 'group'"),
        ({"bits": 4, "act8": True}, "act8 rounds an int8 draft's activations: it needs bits=8"),
    ],
)
def test_bad_qsd_options_are_one_line_errors(options, message):
    with pytest.raises(FastForwardError) as err:
        build_decoder("qsd", make_tiny(), None, options)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_quantized_copy_refuses_bad_arguments_in_one_line():
    target = make_tiny().model
    for kwargs, message in (
        ({"bits": 2}, "bits must be one of 4, 8"),
        ({"bits": 4, "group_size": 48}, "group"),
    ):
        with pytest.raises(FastForwardError, match=message) as err:
            quantized_copy(target, **kwargs)
        assert "\n" not in str(err.value)


@pytest.fixture(scope="module")
def real_subset(smollm2, real_prompts) -> tuple[list[list[int]], list[list[int]]]:
    """Every third real prompt (GSM8K, MT-bench, HumanEval) and its fp32 greedy AR continuation."""
    prompts = real_prompts[::3]
    ar, cfg = ARDecoder(smollm2.model), greedy_config(N_TOKENS, smollm2.eos_token_ids)
    return prompts, [ar.generate(ids, cfg).tokens for ids in prompts]


@pytest.mark.parametrize("bits", [8, 4])
def test_qsd_equals_greedy_ar_fp32_real_prompts(smollm2, real_subset, bits):
    prompts, refs = real_subset
    dec = build_decoder("qsd", smollm2, None, {"bits": bits, "gamma": 4, "gamma_auto": False})
    cfg = greedy_config(N_TOKENS, smollm2.eos_token_ids)
    proposed = accepted = 0
    for ids, ref in zip(prompts, refs, strict=True):
        out = dec.generate(ids, cfg)
        assert out.tokens == ref
        assert sum(out.stats.accepted_per_step) == len(ref) == out.stats.new_tokens
        proposed += out.stats.extras["spec_proposed"]
        accepted += out.stats.extras["spec_accepted"]
    assert len(prompts) >= 8 and 0 < accepted <= proposed


def test_qsd_on_a_prepacked_target_quantizes_a_reload_and_stays_exact(real_prompts) -> None:
    """--path prepacked releases the float Linear weights; qsd reloads them (bf16) to build its copy."""
    from fastforward.models.kernels import path_of
    from fastforward.models.loading import load_model

    target = load_model("smollm2-135m", "float32", path="prepacked")
    assert path_of(target.model) == "prepacked"
    dec = build_decoder("qsd", target, None, {"bits": 8, "gamma": 4, "vocab": 8192, "gamma_auto": False})
    assert (
        dec.drafter.model.shared_layers == 0
    )  # (behind lookup_first) a bf16 reload: keys of another dtype, a cache of its own
    ar = build_decoder("ar", target, None, {})
    config = GenerationConfig(max_new_tokens=24, eos_token_ids=target.eos_token_ids)
    accepted = 0
    for ids in real_prompts[:2]:
        got = dec.generate(ids, config)
        assert got.tokens == ar.generate(ids, config).tokens
        accepted += got.stats.extras["spec_accepted"]
    assert accepted > 0


def test_act8_on_an_unquantized_draft_is_a_one_line_error(monkeypatch):
    monkeypatch.setattr(int8_gemm, "vnni_usable", lambda: True)  # the check this test is about comes after
    with pytest.raises(FastForwardError, match="add draft_bits=8"):
        build_decoder("sd", make_tiny(seed=0), make_tiny(seed=1), {"act8": True})


@pytest.mark.parametrize("method", ["qsd", "typical"])
def test_act8_without_vnni_is_a_one_line_error(monkeypatch, method):
    """Without VNNI torch's int8 GEMM saturates: the draft would be a damaged W8A8 model, and a lossy rule's
    output follows the draft, so act8 is refused rather than run."""
    monkeypatch.setattr(int8_gemm, "vnni_usable", lambda: False)
    options = {"bits": 8, "act8": True} if method == "qsd" else {"draft_bits": 8, "act8": True}
    with pytest.raises(FastForwardError) as err:
        build_decoder(method, make_tiny(seed=0), make_tiny(seed=1), options)
    assert "act8 needs VNNI" in str(err.value) and "\n" not in str(err.value)

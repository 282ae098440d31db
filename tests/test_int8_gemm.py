"""W8A8's multi-row GEMMs through oneDNN's prepacked int8 linear (fastforward.core.int8_gemm): the same values
as ``_int_mm``, the rewrite's scope, and a package over several rows that runs it and gives each token the bits
of its 1-token step."""

from __future__ import annotations

import zipfile

import pytest
import torch

from fastforward.core import int8_gemm
from fastforward.core.engine import compile_forward
from fastforward.models.quantize import Int8DynLinear, quantized_copy

from .conftest import assert_wider_forwards_keep_step_bits, make_tiny

PROMPT = [5, 17, 33, 2, 90, 41, 7, 64, 12, 3, 28]


@pytest.mark.parametrize(
    ("flags", "limit", "usable"),
    [
        ({"avx512f", "avx512_vnni"}, "", True),
        ({"avx512f", "avx512_vnni"}, "AVX512_CORE_VNNI", True),
        ({"avx512f", "avx512_vnni", "avx512_bf16"}, "AVX512_CORE_BF16", True),
        ({"avx512f", "avx512_vnni"}, "AVX512_CORE", False),  # oneDNN's AVX-512 int8 without VNNI saturates
        ({"avx512f", "avx512_vnni"}, "AVX2", False),
        ({"avx2", "avx_vnni"}, "", True),
        ({"avx2", "avx_vnni"}, "AVX2", False),
        ({"avx2", "fma"}, "", False),  # the AVX2-only EPYCs
    ],
)
def test_the_rewrite_runs_only_where_onednn_may_use_vnni(flags, limit, usable) -> None:
    assert int8_gemm.vnni_usable(flags, limit) is usable


@pytest.mark.skipif(
    not int8_gemm.vnni_usable(), reason="oneDNN's int8 kernels without VNNI saturate (rewrite off)"
)
def test_the_prepacked_linear_gives_int_mm_values_where_sums_pass_2_to_the_24() -> None:
    """Extreme activations and weights over 1536 inputs: sums up to 127 * 127 * 1536 (~2^24.6), and the
    uint8 form's up to 255 * 127 * 1536, where float32 no longer holds every integer. Equal to the bit."""
    torch.manual_seed(0)
    k, n = 1536, 96
    w = torch.where(torch.rand(n, k) < 0.5, -127, 127).to(torch.int8)
    w[:4] = 127  # rows whose sums with all-127 activations reach the largest magnitude
    packed = torch.ops.onednn.qlinear_prepack(w, None)
    ones, zeros = torch.ones(n), torch.zeros(n, dtype=torch.int32)
    for rows in (1, 2, 8):
        x = torch.where(torch.rand(rows, k) < 0.5, -127, 127).to(torch.int8)
        x[0] = 127
        want = torch._int_mm(x, w.t()).to(torch.float32)
        assert want.abs().max() > 2**24
        assert torch.equal(int8_gemm.prepacked_mm(x, packed, ones, zeros), want), rows


class _Two(torch.nn.Module):
    def __init__(self, other: bool) -> None:
        super().__init__()
        self.q = Int8DynLinear(torch.nn.Linear(64, 32, bias=False))
        self.f = torch.nn.Linear(32, 16) if other else torch.nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.f(self.q(x))


def test_only_a_graph_whose_gemms_are_all_int8_is_rewritten() -> None:
    x = torch.randn(4, 64)
    for other, want in ((False, True), (True, False)):
        program = torch.export.export(_Two(other).eval(), (x,), strict=False)
        assert int8_gemm.rewritable(program.graph.nodes) is want
    program = torch.export.export(torch.nn.Linear(64, 16).eval(), (x,), strict=False)
    assert not int8_gemm.rewritable(program.graph.nodes)  # no int8 product at all


def _sources(package) -> str:
    """The generated C++ an AOTInductor package keeps inside (its wrapper and kernels)."""
    with zipfile.ZipFile(package) as z:
        return "\n".join(z.read(n).decode() for n in z.namelist() if n.endswith(".cpp"))


def test_a_w8a8_package_over_several_tokens_runs_the_prepacked_linear_with_its_1_token_bits(
    tmp_path, monkeypatch
) -> None:
    monkeypatch.setattr(int8_gemm, "MIN_WEIGHT", 0)  # the tiny model's weights are all below the real bound
    torch.manual_seed(3)
    model = quantized_copy(make_tiny("llama", vocab=96, seed=5).model, 8, activations=True)
    compile_forward(model, capacity=256, mode=None, store=tmp_path, widths=(1, 4))
    assert_wider_forwards_keep_step_bits(model, PROMPT)
    packages = {p.name: p for p in tmp_path.rglob("*.pt2")}
    assert {n.split("-")[0] for n in packages} == {"k1", "k4"}, packages
    prepacked = int8_gemm.vnni_usable()  # elsewhere every package keeps _int_mm
    for name, package in packages.items():
        code = _sources(package)
        assert ("qlinear_pointwise" in code) is (prepacked and name.startswith("k4")), name
        assert ("_int_mm" in code) is (not prepacked or name.startswith("k1")), name

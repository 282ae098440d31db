"""W8A8's GEMMs through oneDNN's prepacked int8 linear and, over one row, inductor's VNNI template
(fastforward.core.int8_gemm): the same values as ``_int_mm``, the rewrites' scope, and packages that run them
and give each token the bits of its 1-token step."""

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


def test_the_1_row_form_cuts_k_into_chunks_whose_sums_float32_holds() -> None:
    for k in (64, 576, 1024, 1025, 1536, 2500, 8960):
        parts = int8_gemm.chunks(k)
        assert parts[0][0] == 0 and parts[-1][1] == k, k
        assert all(a[1] == b[0] for a, b in zip(parts, parts[1:], strict=False)), k  # contiguous
        assert all(lo % 4 == 0 and 0 < hi - lo <= int8_gemm.CHUNK for lo, hi in parts), k
        assert len(parts) == -(-k // int8_gemm.CHUNK), k  # the fewest
    assert int8_gemm.CHUNK * 128 * 128 <= 2**24  # every chunk's sums are integers float32 holds


class _Extreme(torch.nn.Module):
    """One ``_int_mm`` over a constant int8 weight of 2500 inputs (three chunks) whose first columns, with
    all-127 activations, sum past 2^24 to values float32 cannot hold."""

    def __init__(self, k: int = 2500, n: int = 64) -> None:
        super().__init__()
        w = torch.where(torch.rand(k, n) < 0.5, -127, 127).to(torch.int8)
        w[:, :4] = 127
        w[:, 4:8] = -127
        self.register_buffer("w", w)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch._int_mm(x, self.w)


@pytest.mark.skipif(
    not (int8_gemm.vnni_usable() and int8_gemm.template_kernel()),
    reason="the split form runs only where VNNI is usable and inductor has an int8 micro-kernel",
)
def test_the_1_row_form_on_inductors_template_gives_int_mm_values_past_2_to_the_24(
    tmp_path, monkeypatch
) -> None:
    """The package a 1-token W8A8 step gets (aot.build: the split form, inductor's int8 template) over
    extreme values: equal to ``_int_mm`` to the bit where a float32 sum would round, and the template's
    VNNI (or AMX) micro-kernel is what runs."""
    torch.manual_seed(0)
    module = _Extreme().eval()
    x = torch.full((1, 2500), 127, dtype=torch.int8)
    x[0, 0] = 1  # column 0's sum: 127 * (127 * 2499 + 1) = 40306498, between float32's multiples of 4
    want = module(x)
    assert (want.to(torch.float32).to(torch.int64) != want.to(torch.int64)).any()  # one float32 sum rounds
    program = torch.export.export(module, (x,), strict=False)
    configs = {
        "freezing": True,
        "max_autotune": True,
        "max_autotune_gemm_backends": "CPP",
        "cpp.weight_prepack": True,
        "post_grad_custom_post_pass": int8_gemm.PrepackInt8(split=True),
    }
    # off, as a process that compiled a shared-weights float32 model before has it (core.compiled): aot.build's
    # configs turn it on again for an int8 package, without which the template takes no int8 weight
    with torch.no_grad(), torch._inductor.config.patch({"cpp.weight_prepack": False}):
        path = torch._inductor.aoti_compile_and_package(
            program, package_path=str(tmp_path / "k1.pt2"), inductor_configs=configs
        )
        run = torch._inductor.aoti_load_package(path)
        assert torch.equal(run(x), want)
        for extreme in (
            -x,
            torch.full_like(x, -127),
            torch.where(torch.rand(1, 2500) < 0.5, -127, 127).to(torch.int8),
        ):
            assert torch.equal(run(extreme), module(extreme))
    code = _sources(path)
    assert "dpbusd" in code and "_int_mm" not in code  # VNNI (_mm512_dpbusd_epi32) or AMX (_tile_dpbusd)


class _Pair(torch.nn.Module):
    """``_int_mm`` over constant weights whose first columns, with all-127 activations, sum past 2^24: K 1500
    (``short``: the 2+-row form on the template, three chunks of 500) and K 2500 (``long``, past
    ``SHIFT_MAX_K``: the prepacked linear, kept off the template); ``which``: both, or one of them."""

    def __init__(self, which: str = "both", n: int = 64) -> None:
        super().__init__()
        self.which = which
        for name, k in (("short", 1500), ("long", 2500)):
            w = torch.where(torch.rand(k, n) < 0.5, -127, 127).to(torch.int8)
            w[:, :4] = 127
            w[:, 4:8] = -127
            self.register_buffer(name, w)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        short, long = torch._int_mm(x[:, :1500], self.short), torch._int_mm(x, self.long)
        return {"short": short, "long": long}.get(self.which, torch.cat([short, long], 1))


def _build_2_rows(module: torch.nn.Module, x: torch.Tensor, path) -> object:
    """``module`` compiled as aot.build compiles a 2+-token W8A8 step where the template has a micro-kernel."""
    configs = {
        "freezing": True,
        "max_autotune": True,
        "max_autotune_gemm_backends": "CPP",
        "cpp.weight_prepack": True,
        "post_grad_custom_post_pass": int8_gemm.PrepackInt8(shift=True),
    }
    program = torch.export.export(module, (x,), strict=False)
    with torch.no_grad():
        return torch._inductor.aoti_compile_and_package(
            program, package_path=str(path), inductor_configs=configs
        )


@pytest.mark.skipif(
    not (int8_gemm.vnni_usable() and int8_gemm.template_kernel()),
    reason="the shifted form runs only where VNNI is usable and inductor has an int8 micro-kernel",
)
def test_the_2_row_form_on_inductors_template_gives_int_mm_values_past_2_to_the_24(tmp_path) -> None:
    """The package a 4-token W8A8 step gets (aot.build: short K shifted onto inductor's int8 template, long K
    prepacked for ATen, the templates tuned alone) over extreme values: the short product equal to ``_int_mm`` to
    the bit where float32 sums would round; the long one, whose zero point the template would subtract in
    float32, kept on oneDNN's kernel (no template code in its own package), its float32 output rounded once
    as ``Int8DynLinear``'s own conversion rounds it."""
    assert int8_gemm.SHIFT_CHUNK * 255 * 128 < 2**24  # a chunk's shifted sums are integers float32 holds
    torch.manual_seed(1)
    module = _Pair().eval()
    x = torch.full((4, 2500), 127, dtype=torch.int8)
    x[:, 0] = 1
    want = module(x)
    assert (want.to(torch.float32).to(torch.int64) != want.to(torch.int64)).any()  # float32 sums would round
    run = torch._inductor.aoti_load_package(_build_2_rows(module, x, tmp_path / "k4.pt2"))
    for extreme in (
        x,
        -x,
        torch.full_like(x, -128),
        torch.where(torch.rand(4, 2500) < 0.5, -128, 127).to(torch.int8),
    ):
        got, want = run(extreme), module(extreme)
        assert torch.equal(got[:, :64], want[:, :64])  # the shifted form: exact integers
        assert torch.equal(got[:, 64:].float(), want[:, 64:].float())
    assert "dpbusd" in _sources(tmp_path / "k4.pt2")
    long = _Pair("long").eval()
    assert "dpbusd" not in _sources(_build_2_rows(long, x, tmp_path / "long.pt2"))


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
        code = _sources(package)  # no autotuning here: the 1-token package keeps _int_mm (no template)
        assert ("qlinear_pointwise" in code) is (prepacked and name.startswith("k4")), name
        assert ("_int_mm" in code) is (not prepacked or name.startswith("k1")), name

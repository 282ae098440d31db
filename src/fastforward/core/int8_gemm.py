"""W8A8's GEMMs in a compiled package: oneDNN's prepacked int8 linear and inductor's VNNI template, each summing exactly.

Where inductor has an int8 micro-kernel (VNNI or AMX) and autotuning is on, every product runs on its template
in a form whose float32 sums are exact (over 1 row :func:`split_rows`; over 2+ rows :func:`shift_rows` for K up
to :data:`SHIFT_MAX_K`), except the 2+-row products with a longer K, which keep oneDNN's prepacked linear
(:func:`rewrite`, ``aten_only``). Elsewhere the 2+-row products run on the prepacked linear and the 1-row ones
on ``_int_mm``. The rest of this docstring is the history of each choice.

Why: :class:`fastforward.models.quantize.Int8DynLinear` multiplies with ``aten._int_mm``, which takes the
int8 weights in their plain layout on every call. On a 2-core Ice Lake Xeon (AVX-512 VNNI, session 53) its
GEMMs for one Qwen2.5-Coder-1.5B forward cost 68.1 ms over 1 row but 163.6 / 154.7 ms over 2 / 8 rows, which
is most of why the 1.5B's 8-token W8A8 forward cost 3.3x its 1-token one; oneDNN's int8 linear over
weights it laid out once (``onednn.qlinear_prepack``) costs 77.5 / 98.0 / 111.7 ms for 1 / 2 / 8 rows
(results/compiled_s53/qlinear.txt). So a package for 2 or more fed tokens runs its large int8 GEMMs (:data:`MIN_WEIGHT`) through the
prepacked linear. The 1-token package runs all of them on inductor's int8 GEMM template instead, in a form
whose sums are exact (:func:`split_rows`): on a 2-core Zen 4 EPYC both ATen kernels stream a 1-row product's
weights at ~20-30 GB/s, and the 1.5B's 1-token step took 50 ms on the template against 69 ms on
``_int_mm``, with the same logits (one process, alternating; results/compiled_s62/ab_k1_qwen15.txt).

How: ``torch.export`` cannot trace ``qlinear_prepack`` (it has no fake implementation), so the model keeps
``_int_mm`` and :class:`PrepackInt8` rewrites the graph inductor lowers, after freezing has turned the
weights into real constants (inductor's ``post_grad_custom_post_pass``): each ``_int_mm(x, W)`` whose ``W``
is a constant (through transposes) becomes oneDNN's u8 x s8 linear of ``x + 128`` with zero point 128, unit
scales and float32 out, over ``W`` prepacked here, converted back to int32 so the model's own scaling
follows unchanged. AOTInductor keeps prepacked (mkldnn) constants in the package.

Exact: with VNNI, oneDNN accumulates in int32 and subtracts the zero point's share there, so the float32 it
returns is the integer ``_int_mm`` computes, rounded once, as ``Int8DynLinear``'s own ``.to(float32)`` rounds
it; a token's logits are the same whichever width runs it (tests/test_int8_gemm.py). Without VNNI its
kernels saturate pairs of products in int16, so the rewrite runs only where VNNI is usable
(:func:`vnni_usable`). Only through ATen's kernel: inductor's int8 GEMM template subtracts the zero point
after converting to float32, which rounds sums past 2^24 differently, so a package with this rewrite tunes
ATen's GEMMs alone (:func:`fastforward.core.aot.build`). The 1-token package's form (:func:`split_rows`)
needs no zero point and keeps every float32 sum below 2^24, so it may run on the template, and its package
tunes the templates alone: only where inductor has an int8 micro-kernel for this process's vector ISA
(:func:`template_kernel`) and autotuning is on; elsewhere the 1-token package keeps ``_int_mm``. Either way
a graph with any other GEMM or attention kernel (whose backend that would change) is left as it is
(:func:`rewritable`).
"""

from __future__ import annotations

import functools
import hashlib
import inspect
from collections.abc import Iterable, Iterator

import torch
from torch._inductor.custom_graph_pass import CustomGraphPass

aten = torch.ops.aten
convert = torch.ops.prims.convert_element_type.default

MIN_ROWS = 2  # fewer rows: the split form on inductor's template (split_rows), not the prepacked linear
# weights of at least this many int8 values (K x N) only: oneDNN's linear costs ~0.06-0.09 ms a call whatever
# its size, so on SmolLM2's 576 x 576-1536 layers it lost to _int_mm at every row count (0.08 against 0.02-0.06
# ms), broke even on the 1.5B's 1536 x 1536 (0.15 / 0.18 against 0.14 / 0.18 ms at 2 / 8 rows) and won from
# 13.8M values (1536 x 8960: 0.45 / 0.66 against 0.92 / 1.09 ms) and on both heads
# (results/compiled_s54/qlinear_shapes.txt)
MIN_WEIGHT = 8 * 2**20
ZERO_POINT = 128  # int8 activations shifted into uint8, the source type oneDNN's int8 linear takes
# the 1-row form's K chunk: 1024 products of at most 128 x 128 sum to at most 2^24, which float32 holds exactly
CHUNK = 1024
# the 2+-row form's (shift_rows) K chunk: 512 products of at most 255 x 128 sum to under 2^24
SHIFT_CHUNK = 512
# ... and the longest K it takes: 8960 (the 1.5B's down projection, 18 chunks) cost 9.8 ms against the prepacked
# linear's 7.8 over 8 rows, where 1536 (3 chunks) cost 4.3 / 5.4 / 6.3 against 6.2 / 7.6 / 6.7 ms over 2 / 4 / 8
# rows (8 products of 1536 x 8960, one process, alternating: results/compiled_s63/int8_8rows.txt)
SHIFT_MAX_K = 2048
_TRANSPOSES = (aten.permute.default, aten.t.default, aten.transpose.int)
# every op whose kernel the GEMM backends choose (any overload), attention included: its math form is bmm
_OTHER_GEMMS = {
    aten.mm,
    aten.bmm,
    aten.addmm,
    aten.baddbmm,
    aten.matmul,
    aten.linear,
    aten._weight_int8pack_mm,
    aten._weight_int4pack_mm_for_cpu,
    aten.scaled_dot_product_attention,
    aten._scaled_dot_product_flash_attention_for_cpu,
}
VNNI_ISAS = ("VNNI", "BF16", "FP16", "AMX", "AVX10")  # oneDNN ISA caps that keep its VNNI int8 kernels


def vnni_usable(flags: set[str] | None = None, limit: str | None = None) -> bool:
    """Whether oneDNN may run its u8 x s8 products with VNNI in this process: the CPU has ``avx512_vnni`` or
    ``avx_vnni`` and no ``ONEDNN_MAX_CPU_ISA`` cap (``limit``) below a VNNI ISA. Defaults: this CPU's usable
    flags and cap (:mod:`fastforward.hardware`).

    Why: without VNNI, oneDNN adds pairs of u8 x s8 products in int16 with saturation (``vpmaddubsw``), and
    255 x 127 x 2 overflows it, so the prepacked linear no longer gives ``_int_mm``'s values. Measured on the
    Ice Lake Xeon: tests/test_int8_gemm.py's equality test fails under ``ONEDNN_MAX_CPU_ISA=AVX2`` and
    ``AVX512_CORE`` and passes under ``AVX512_CORE_VNNI`` (session 54)."""
    from fastforward.hardware import cpu_flags, isa_limit

    flags = cpu_flags() if flags is None else flags
    limit = isa_limit() if limit is None else limit.upper()
    if limit and limit not in ("ALL", "DEFAULT") and not any(k in limit for k in VNNI_ISAS):
        return False
    return bool({"avx512_vnni", "avx_vnni"} & flags)


def template_kernel() -> bool:
    """Whether inductor's int8 GEMM template has a VNNI or AMX micro-kernel in this process (its vector ISA,
    which ``ATEN_CPU_CAPABILITY`` may cap). Why: elsewhere (an AVX2 CPU with ``avx_vnni``, a capped process)
    it runs its reference loop, 7.5 ms for two 1536 x 8960 products where ``_int_mm`` takes ~1.2 ms
    (results/compiled_s62/split_harness.txt)."""
    from torch._inductor.cpu_vec_isa import VecAVX512VNNI, pick_vec_isa  # VecAMX is one too

    return isinstance(pick_vec_isa(), VecAVX512VNNI)


def rewritable(nodes: Iterable[torch.fx.Node]) -> bool:
    """Whether a graph's GEMMs are all ``_int_mm``, at least one: then its package may tune ATen's GEMMs
    alone without changing any other product's kernel."""
    packets = {getattr(n.target, "overloadpacket", n.target) for n in nodes if n.op == "call_function"}
    return aten._int_mm in packets and not packets & _OTHER_GEMMS


def constant_weight(node: torch.fx.Node) -> tuple[torch.fx.Node, list[torch.fx.Node]] | None:
    """The ``get_attr`` node a GEMM's right operand reads through transposes, and those transposes from the
    constant outwards; None when it is not a constant."""
    chain: list[torch.fx.Node] = []
    while node.op == "call_function" and node.target in _TRANSPOSES:
        chain.insert(0, node)
        node = node.args[0]  # type: ignore[assignment]
    return (node, chain) if node.op == "get_attr" else None


def shifted(x8: torch.Tensor) -> torch.Tensor:
    """int8 activations as the uint8 that oneDNN's linear takes with zero point :data:`ZERO_POINT`."""
    return (x8.to(torch.int16) + ZERO_POINT).to(torch.uint8)


def prepacked_mm(
    x8: torch.Tensor, packed: torch.Tensor, ones: torch.Tensor, zeros: torch.Tensor
) -> torch.Tensor:
    """``_int_mm(x8, W.T)`` as float32 through oneDNN's linear over ``packed`` = ``qlinear_prepack(W)``, W
    [N, K] int8; ``ones`` [N] float32 and ``zeros`` [N] int32 are the unit weight scales and zero points. The
    eager form of what the rewritten graph runs."""
    return torch.ops.onednn.qlinear_pointwise.default(
        shifted(x8), 1.0, ZERO_POINT, packed, ones, zeros, None, 1.0, 0, torch.float32, "none", [], ""
    )


def _fake(like: torch.Tensor, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    with like.fake_mode:  # type: ignore[attr-defined]
        return torch.empty(shape, dtype=dtype)


def int8_products(
    graph: torch.fx.Graph,
) -> Iterator[tuple[torch.fx.Node, torch.fx.Node, torch.Tensor, torch.Tensor]]:
    """Each ``_int_mm(x, W)`` of ``graph`` whose ``W`` is a constant (through transposes) and whose ``x`` is a
    2-D tensor of known shape, as (node, x, x's fake value, the [K, N] weight ``_int_mm`` reads, rebuilt by the
    graph's own ops from the constant). A snapshot: the caller may replace the nodes as it goes."""
    gm = graph.owning_module
    assert gm is not None
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not aten._int_mm.default:
            continue
        x, w = node.args
        found = constant_weight(w)
        val = x.meta.get("val")
        if found is None or val is None or val.dim() != 2:
            continue
        attr, chain = found
        weight = functools.reduce(getattr, str(attr.target).split("."), gm)
        for op in chain:  # the [K, N] operand _int_mm reads, by the graph's own ops (an identity permute too)
            weight = op.target(weight, *op.args[1:])  # type: ignore[operator]
        yield node, x, val, weight


def rewrite(
    graph: torch.fx.Graph, min_rows: int = MIN_ROWS, min_weight: int = MIN_WEIGHT, aten_only: bool = False
) -> int:
    """Replace each ``_int_mm`` of ``graph`` over a constant weight of at least ``min_weight`` values and at
    least ``min_rows`` rows by the prepacked linear (module docstring). The graph's module gets the prepacked
    weights, scales and zero points as attributes. Returns how many GEMMs were rewritten.

    ``aten_only``: for a package whose autotuning may also choose inductor's int8 template (:func:`shift_rows`
    beside this), the weights' zero points are computed in the graph (zeros all the same) instead of read
    as a constant, and inductor offers its template only for a constant zero point of 0 (its lowering of
    ``qlinear_pointwise``); so these products, whose activations' zero point of 128 the template would
    subtract in float32, run on oneDNN's exact kernel whatever the backends."""
    gm = graph.owning_module
    assert gm is not None
    done = 0
    for node, x, val, weight in int8_products(graph):
        if int(val.shape[0]) < min_rows or weight.numel() < min_weight:
            continue
        w_nk = weight.t().contiguous()  # prepack takes [N, K]
        n = int(w_nk.shape[0])
        names = []
        for kind, tensor in (
            ("packed", torch.ops.onednn.qlinear_prepack(w_nk, None)),
            ("ones", torch.ones(n)),
            ("zeros", torch.zeros(n, dtype=torch.int32)),
        ):
            names.append(f"_int8_prepacked_{done}_{kind}")
            setattr(gm, names[-1], tensor)
        rows = int(val.shape[0])
        with graph.inserting_before(node):
            packed, ones, zeros = (graph.get_attr(name) for name in names)
            if aten_only:  # computed, not a constant: no template for this product (docstring)
                zeros = graph.call_function(
                    aten.full.default, ([n], 0), {"dtype": torch.int32, "device": weight.device}
                )
                zeros.meta["val"] = _fake(val, (n,), torch.int32)
            x16 = graph.call_function(convert, (x, torch.int16))
            moved = graph.call_function(aten.add.Tensor, (x16, ZERO_POINT))
            u8 = graph.call_function(convert, (moved, torch.uint8))
            y = graph.call_function(
                torch.ops.onednn.qlinear_pointwise.default,
                (u8, 1.0, ZERO_POINT, packed, ones, zeros, None, 1.0, 0, torch.float32, "none", [], ""),
            )
            back = graph.call_function(convert, (y, torch.int32))
        for made, shape, dtype in (
            (x16, tuple(val.shape), torch.int16),
            (moved, tuple(val.shape), torch.int16),
            (u8, tuple(val.shape), torch.uint8),
            (y, (rows, n), torch.float32),
            (back, (rows, n), torch.int32),
        ):
            made.meta["val"] = _fake(val, shape, dtype)
        node.replace_all_uses_with(back)
        graph.erase_node(node)
        done += 1
    if done:
        graph.eliminate_dead_code()
    return done


def _node(
    graph: torch.fx.Graph, like: torch.Tensor, target: object, args: tuple, shape: tuple, dtype: torch.dtype
) -> torch.fx.Node:
    """A new node of ``graph`` (at its insertion point), with its fake value in ``like``'s fake mode: the
    shapes inductor lowers by."""
    made = graph.call_function(target, args)  # type: ignore[arg-type]
    made.meta["val"] = _fake(like, shape, dtype)
    return made


def _chunk_product(
    graph: torch.fx.Graph,
    like: torch.Tensor,
    u8: torch.fx.Node,
    w_nk: torch.Tensor,
    lo: int,
    hi: int,
    name: str,
) -> torch.fx.Node:
    """The int32 node of ``u8[:, lo:hi] @ w_nk[:, lo:hi].T`` through oneDNN's linear with zero point 0, unit
    scales and float32 out (which inductor's int8 template may run), its weight prepacked here and kept on
    the graph's module under ``name``: one chunk of :func:`split_rows` and :func:`shift_rows`, whose chunk
    sizes keep every float32 sum exact."""
    gm = graph.owning_module
    assert gm is not None
    n = int(w_nk.shape[0])
    rows = int(u8.meta["val"].shape[0])
    for kind, tensor in (
        ("packed", torch.ops.onednn.qlinear_prepack(w_nk[:, lo:hi].contiguous(), None)),
        ("ones", torch.ones(n)),
        ("zeros", torch.zeros(n, dtype=torch.int32)),
    ):
        setattr(gm, f"{name}_{kind}", tensor)
    packed, ones, zeros = (graph.get_attr(f"{name}_{kind}") for kind in ("packed", "ones", "zeros"))
    part = _node(graph, like, aten.slice.Tensor, (u8, 1, lo, hi), (rows, hi - lo), torch.uint8)
    y = _node(
        graph,
        like,
        torch.ops.onednn.qlinear_pointwise.default,
        (part, 1.0, 0, packed, ones, zeros, None, 1.0, 0, torch.float32, "none", [], ""),
        (rows, n),
        torch.float32,
    )
    return _node(graph, like, convert, (y, torch.int32), (rows, n), torch.int32)


def split_rows(graph: torch.fx.Graph, max_rows: int = MIN_ROWS - 1) -> int:
    """Replace each ``_int_mm`` of ``graph`` over a constant weight and at most ``max_rows`` rows by a form
    inductor's int8 GEMM template (its VNNI micro-kernel) runs exactly, whatever the sums: the activations
    split into their positive and negative parts (two uint8 row blocks, zero point 0, so the template's
    epilogue subtracts nothing) and the product cut along K into chunks of :data:`CHUNK`, each chunk's sums
    at most 2^24 and so exact in the float32 the template returns; back in int32, the chunks add and the
    negative part's rows subtract exactly, giving ``_int_mm``'s integers. Returns how many GEMMs it replaced.

    Why: ATen's int8 kernels stream the weights of a 1-row product at ~20-30 GB/s on a 2-core Zen 4 EPYC,
    half of what inductor's templates reach on bfloat16 weights there (results/compiled_s62). The template's
    own zero-point path subtracts the shift after converting to float32, which is not exact past 2^24
    (module docstring); this form never needs it."""
    done = 0
    for node, x, val, weight in int8_products(graph):
        if int(val.shape[0]) > max_rows:
            continue
        w_nk = weight.t().contiguous()
        n, k = (int(d) for d in w_nk.shape)
        rows = int(val.shape[0])

        call = functools.partial(_node, graph, val)
        with graph.inserting_before(node):
            x16 = call(convert, (x, torch.int16), (rows, k), torch.int16)
            pos = call(aten.clamp_min.default, (x16, 0), (rows, k), torch.int16)
            neg = call(
                aten.clamp_min.default,
                (call(aten.neg.default, (x16,), (rows, k), torch.int16), 0),
                (rows, k),
                torch.int16,
            )
            both = call(
                convert,
                (call(aten.cat.default, ([pos, neg], 0), (2 * rows, k), torch.int16), torch.uint8),
                (2 * rows, k),
                torch.uint8,
            )
            total = None
            for c, (lo, hi) in enumerate(chunks(k)):
                yi = _chunk_product(graph, val, both, w_nk, lo, hi, f"_int8_split_{done}_{c}")
                plus = call(aten.slice.Tensor, (yi, 0, 0, rows), (rows, n), torch.int32)
                minus = call(aten.slice.Tensor, (yi, 0, rows, 2 * rows), (rows, n), torch.int32)
                diff = call(aten.sub.Tensor, (plus, minus), (rows, n), torch.int32)
                total = (
                    diff if total is None else call(aten.add.Tensor, (total, diff), (rows, n), torch.int32)
                )
        node.replace_all_uses_with(total)
        graph.erase_node(node)
        done += 1
    if done:
        graph.eliminate_dead_code()
    return done


def shift_rows(graph: torch.fx.Graph, min_rows: int = MIN_ROWS, max_k: int = SHIFT_MAX_K) -> int:
    """Replace each ``_int_mm`` of ``graph`` over a constant weight, at least ``min_rows`` rows and K at most
    ``max_k`` by a form inductor's int8 GEMM template runs exactly: the activations shifted into uint8
    (``x + 128``) with zero point 0, so its epilogue subtracts nothing, and K cut into chunks of
    :data:`SHIFT_CHUNK`, each chunk's sums under 2^24 and so exact in the float32 the template returns; back in
    int32 the chunks add and ``128 x`` the weight's column sums (a constant) come off, giving ``_int_mm``'s
    integers. Returns how many GEMMs it replaced.

    Why: over 2-8 rows oneDNN's prepacked linear takes the 1.5B's gate and up projections (1536 x 8960) at
    6.2-7.6 ms for 8 products where the template takes 4.3-6.3 (results/compiled_s63/int8_8rows.txt). Unlike
    :func:`split_rows` the rows are not doubled, which over 8 rows cost more than it saved (session 62)."""
    gm = graph.owning_module
    assert gm is not None
    done = 0
    for node, x, val, weight in int8_products(graph):
        w_nk = weight.t().contiguous()
        n, k = (int(d) for d in w_nk.shape)
        rows = int(val.shape[0])
        if rows < min_rows or k > max_k:
            continue

        call = functools.partial(_node, graph, val)

        offset = f"_int8_shift_{done}_offset"
        setattr(gm, offset, (w_nk.to(torch.int32).sum(1, dtype=torch.int32) * ZERO_POINT).reshape(1, n))
        with graph.inserting_before(node):
            x16 = call(convert, (x, torch.int16), (rows, k), torch.int16)
            u8 = call(
                convert,
                (call(aten.add.Tensor, (x16, ZERO_POINT), (rows, k), torch.int16), torch.uint8),
                (rows, k),
                torch.uint8,
            )
            total = None
            for c, (lo, hi) in enumerate(chunks(k, SHIFT_CHUNK)):
                yi = _chunk_product(graph, val, u8, w_nk, lo, hi, f"_int8_shift_{done}_{c}")
                total = yi if total is None else call(aten.add.Tensor, (total, yi), (rows, n), torch.int32)
            off = graph.get_attr(offset)
            off.meta["val"] = _fake(val, (1, n), torch.int32)
            total = call(aten.sub.Tensor, (total, off), (rows, n), torch.int32)
        node.replace_all_uses_with(total)
        graph.erase_node(node)
        done += 1
    if done:
        graph.eliminate_dead_code()
    return done


def chunks(k: int, size: int = CHUNK, align: int = 4) -> list[tuple[int, int]]:
    """``[0, k)`` cut into the fewest near-equal ranges of at most ``size`` (a multiple of ``align``), each
    starting at a multiple of ``align``: the VNNI micro-kernel takes K in groups of 4."""
    count = -(-k // size)
    step = -(-k // count // align) * align if k > size else k
    return [(lo, min(k, lo + step)) for lo in range(0, k, step)]


class PrepackInt8(CustomGraphPass):
    """:func:`rewrite` (or, ``split``, :func:`split_rows`) as inductor's ``post_grad_custom_post_pass``;
    ``uuid`` (inductor's cache key for the pass) is a hash of this module's source and the settings, so a
    change to either compiles anew."""

    def __init__(
        self,
        min_rows: int = MIN_ROWS,
        min_weight: int | None = None,
        split: bool = False,
        shift: bool = False,
    ) -> None:
        self.min_rows = min_rows
        self.min_weight = MIN_WEIGHT if min_weight is None else min_weight  # read when built: tests lower it
        self.split = split  # the 1-row form for inductor's template (split_rows) instead
        # 2+ rows: K up to SHIFT_MAX_K in the shifted form on the template (shift_rows), the rest prepacked for
        # ATen alone (rewrite's aten_only), so the package's backend is the templates
        self.shift = shift

    def __call__(self, graph: torch.fx.Graph) -> None:
        if self.split:
            split_rows(graph, self.min_rows - 1)
        elif self.shift:
            # every other product over a constant too, whatever its size: the package tunes the templates alone
            # (aot.build), and inductor lowers an _int_mm only to ATen's kernel
            shift_rows(graph, self.min_rows)
            rewrite(graph, self.min_rows, 0, aten_only=True)
        else:
            rewrite(graph, self.min_rows, self.min_weight)

    def uuid(self) -> str:
        source = inspect.getsource(inspect.getmodule(PrepackInt8))  # type: ignore[arg-type]
        key = f"{source}:{self.min_rows}:{self.min_weight}:{self.split}:{self.shift}"
        return hashlib.sha256(key.encode()).hexdigest()

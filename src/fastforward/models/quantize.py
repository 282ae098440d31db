"""Weight-only int8 / int4 copies of a causal LM, built from torch's own CPU kernels (the ``qsd`` draft).

A quantized copy of the target is a cheap draft that agrees with it most of the time: same architecture,
same tokenizer, same training, only the Linear weights rounded. Verification stays the target's, so the
copy's rounding can cost acceptance but never change an output.

- :class:`Int8Linear`: per-output-channel symmetric int8 (``w ~ q * scale``, q in [-127, 127]), run with
  ``aten._weight_int8pack_mm``.
- :class:`Int4Linear`: group-wise asymmetric int4 in the tinygemm layout that torchao's int4 weight-only
  CPU path uses: per group of ``group_size`` input features a scale and a zero with ``w ~ (q - 8) * scale +
  zero``, q in [0, 15]; packed by ``aten._convert_weight_to_int4pack_for_cpu`` and run with
  ``aten._weight_int4pack_mm_for_cpu(x, packed, group_size, scales_and_zeros[K / group_size, N, 2])``.
- :class:`Int8DynLinear` (W8A8, ``--weights w8a8``): the same int8 weights, and each token's activations
  quantized to int8 as it runs; ``aten._int_mm`` multiplies them.
- :func:`quantized_copy`: the model with every ``nn.Linear`` (LM head included) replaced, every other
  parameter shared with the target.

Activation dtype. Both kernels take fp32, fp16 and bf16 activations, with scales of the same dtype. On an
AVX2 CPU (torch 2.13) only bf16 has a fast path: one decode token (M = 1) through a 1536 x 8960 layer costs
int8 0.87 ms / int4 1.25 ms in bf16 against 11 / 18 ms in fp32 and worse in fp16 (fp32 ``F.linear``:
5.9 ms). So the layers compute in ``compute_dtype`` (bf16 by default) whatever the target's dtype, casting
the activation in and the result back; their scales are stored in that dtype and the weights are rounded
against the stored scales, so what the kernel sees is exactly what was quantized.

Kernel limits, checked here rather than left to the kernels (the int8 one crashes the process on them):
int8 needs ``in_features % 4 == 0`` (else a one-line FastForwardError); int4 needs ``out_features % 16 == 0``
and ``in_features`` divisible by a group size in {32, 64, 128, 256}. A layer whose ``in_features`` the
requested group size does not divide uses the largest allowed smaller one that does (SmolLM2's hidden size
576 takes 64 where 128 was asked: finer groups, slightly more scale memory, still int4); a layer no int4
group fits (``in_features % 32`` or ``out_features % 16`` nonzero) falls back to int8. :func:`layer_kinds`
says what each copy ended up with.
"""

from __future__ import annotations

import copy
from collections import Counter

import torch
from torch import nn

from fastforward.errors import FastForwardError

INT4_GROUP_SIZES = (32, 64, 128, 256)
BITS = (4, 8)
_ROWS = 4096  # output rows quantized (and packed) at a time: bounds the fp32 temporaries of a large LM head


def _int8_kernel_check(linear: nn.Linear) -> None:
    if linear.in_features % 4:
        raise FastForwardError(
            f"cannot quantize a Linear with in_features={linear.in_features}: "
            "the int8 kernel needs a multiple of 4"
        )


def int8_rows(w: torch.Tensor, scale_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric int8 per output row of a weight [N, K]: (q [N, K] int8, scales [N] in ``scale_dtype``), the
    rows rounded against the stored scales, so what a kernel sees is exactly what was quantized; done
    :data:`_ROWS` rows at a time to bound the float32 temporaries of a large LM head."""
    qweight = torch.empty(w.shape, dtype=torch.int8, device=w.device)
    scales = torch.empty(w.shape[0], dtype=scale_dtype, device=w.device)
    for r in range(0, w.shape[0], _ROWS):
        chunk = w[r : r + _ROWS].float()
        s = (chunk.abs().amax(1) / 127).clamp(min=1e-8).to(scale_dtype)
        qweight[r : r + _ROWS] = (chunk / s.float()[:, None]).round().clamp(-127, 127).to(torch.int8)
        scales[r : r + _ROWS] = s
    return qweight, scales


class Int8Linear(nn.Module):
    """``nn.Linear`` with per-output-channel symmetric int8 weights; the bias (if any) is the source's own
    tensor, shared, not copied."""

    def __init__(self, linear: nn.Linear, compute_dtype: torch.dtype = torch.bfloat16) -> None:
        super().__init__()
        _int8_kernel_check(linear)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        qweight, scales = int8_rows(linear.weight.detach(), compute_dtype)
        self.register_buffer("qweight", qweight)
        self.register_buffer("scales", scales)
        self.bias = linear.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x2 = x.reshape(-1, self.in_features).to(self.scales.dtype).contiguous()
        y = torch.ops.aten._weight_int8pack_mm(x2, self.qweight, self.scales)
        if self.bias is not None:
            y = y + self.bias
        return y.to(x.dtype).reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8, {self.scales.dtype}"


def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric int8 per row (a token's activations): ``x ~ q * scale`` with q in [-127, 127] and ``scale`` =
    the row's largest magnitude / 127 as a float32 column. Each row's result depends on that row alone, so a
    token quantizes the same whichever forward, and whichever width, it is fed in."""
    xf = x.float()
    scale = xf.abs().amax(-1, keepdim=True).clamp(min=1e-12) / 127
    return (xf / scale).round().clamp(-127, 127).to(torch.int8), scale


class Int8DynLinear(nn.Module):
    """``nn.Linear`` as W8A8: the weights per output channel in symmetric int8, as :class:`Int8Linear`'s, and
    each token's activations quantized to int8 when it runs (:func:`quantize_rows`), multiplied by
    ``aten._int_mm`` with int32 accumulation (oneDNN's int8 GEMM, VNNI where the CPU has it) and scaled back
    by the two scales. The bias is shared.

    Why: a weight-only int8 kernel dequantizes every weight for every token it multiplies, so a step over 8
    tokens costs several 1-token steps (the 1.5B's 8-token forward cost 4.3x its 1-token one on a 2-core
    EPYC, session 46); an int8 x int8 GEMM reads the int8 weights once for all the tokens, which is what
    llama.cpp's Q8_0 does (it quantizes activations in blocks of 32). It is also the fast int8 path on a CPU
    without bf16 instructions, where the weight-only kernels have none.

    Lossless with respect to its own greedy AR: the integer products are exact and every other operation
    is per token, so a multi-token verify forward computes each token exactly as a 1-token step would. It is
    a different model from the weight-only int8 one (its activations are rounded too); what that costs in
    agreement with the full-precision model is measured, not assumed (docs/results.md)."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        _int8_kernel_check(linear)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        qweight, scales = int8_rows(linear.weight.detach(), torch.float32)
        # [K, N] as _int_mm takes it, a transposed view of the [N, K] rows: oneDNN's int8 GEMM ran a 1-token
        # product over it faster than over a contiguous [K, N] copy (0.8 against 3.3 ms, 1536 x 8960)
        self.register_buffer("qweight", qweight.t())
        self.register_buffer("scales", scales)
        self.bias = linear.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xq, xs = quantize_rows(x.reshape(-1, self.in_features))
        # int32 -> float, times the product of the two scales: not (acc * token scale) * channel scale, the
        # form inductor's freezing pass rewrites to oneDNN's int8 linear (torchao's dynamic int8 pattern), which
        # ran SmolLM2's 1- and 8-token steps 5x and 19x slower than the int8 GEMM itself on an AVX-512 Xeon
        # without AMX (results/compiled_s52/gemm.txt)
        y = torch._int_mm(xq, self.qweight).to(torch.float32) * (xs * self.scales)
        if self.bias is not None:
            y = y + self.bias.float()
        return y.to(x.dtype).reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, w8a8 (int8 activations per token)"


class Int4Linear(nn.Module):
    """``nn.Linear`` with group-wise asymmetric int4 weights (tinygemm layout); the bias is shared.

    ``group_size`` must be one the kernel takes and must divide ``in_features``; ``out_features`` must be a
    multiple of 16 (:func:`int4_group_size` picks a group, or None when int4 does not fit)."""

    def __init__(
        self, linear: nn.Linear, group_size: int = 128, compute_dtype: torch.dtype = torch.bfloat16
    ) -> None:
        super().__init__()
        n, k = linear.out_features, linear.in_features
        if int4_group_size(linear, group_size) != group_size:
            raise FastForwardError(
                "int4 needs out_features % 16 == 0 and in_features divisible by a group_size in "
                f"{INT4_GROUP_SIZES}; got out_features={n}, in_features={k}, group_size={group_size}"
            )
        self.in_features, self.out_features, self.group_size = k, n, group_size
        w = linear.weight.detach()
        packed, sz = [], []
        # _ROWS is a multiple of the kernel's packing block (32 or 64 rows), so chunks pack like the whole
        for r in range(0, n, _ROWS):
            g = w[r : r + _ROWS].float().reshape(-1, k // group_size, group_size)
            lo, hi = g.amin(-1), g.amax(-1)
            scale = ((hi - lo) / 15).clamp(min=1e-6).to(compute_dtype)
            zero = (lo + 8 * scale.float()).to(compute_dtype)
            q = ((g - zero.float()[..., None]) / scale.float()[..., None] + 8).round().clamp(0, 15)
            packed.append(
                torch.ops.aten._convert_weight_to_int4pack_for_cpu(q.reshape(-1, k).to(torch.int32), 1)
            )
            sz.append(torch.stack([scale, zero], -1).transpose(0, 1))  # [K / group, rows, 2]
        self.register_buffer("qweight", torch.cat(packed))  # [N, K / 2] uint8
        self.register_buffer("scales_and_zeros", torch.cat(sz, 1).contiguous())  # [K / group, N, 2]
        self.bias = linear.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x2 = x.reshape(-1, self.in_features).to(self.scales_and_zeros.dtype).contiguous()
        y = torch.ops.aten._weight_int4pack_mm_for_cpu(
            x2, self.qweight, self.group_size, self.scales_and_zeros
        )
        if self.bias is not None:
            y = y + self.bias
        return y.to(x.dtype).reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, int4, "
            f"group_size={self.group_size}, {self.scales_and_zeros.dtype}"
        )


def int4_group_size(linear: nn.Linear, group_size: int) -> int | None:
    """The int4 group size this layer gets: the largest allowed size <= ``group_size`` dividing
    ``in_features``, or None when int4 does not fit the layer (it then stays int8)."""
    if linear.out_features % 16:
        return None
    fits = [g for g in INT4_GROUP_SIZES if g <= group_size and linear.in_features % g == 0]
    return max(fits) if fits else None


def quantize_linear(
    linear: nn.Linear,
    bits: int,
    group_size: int = 128,
    compute_dtype: torch.dtype = torch.bfloat16,
    activations: bool = False,
) -> nn.Module:
    """One layer: int4 when ``bits == 4`` and a group fits (see module doc), else int8; W8A8
    (:class:`Int8DynLinear`) when ``activations`` asks for int8 activations too (8 bits only)."""
    if activations:
        return Int8DynLinear(linear)
    group = int4_group_size(linear, group_size) if bits == 4 else None
    if group is not None:
        return Int4Linear(linear, group, compute_dtype)
    return Int8Linear(linear, compute_dtype)


def quantized_copy(
    model: nn.Module,
    bits: int,
    group_size: int = 128,
    compute_dtype: torch.dtype = torch.bfloat16,
    activations: bool = False,
) -> nn.Module:
    """A model of the same class whose every ``nn.Linear`` (the LM head too, even when it is tied to the
    embeddings) is :func:`quantize_linear`'d, and whose every other parameter and buffer IS the target's.

    Why this shape: the copy must be an ordinary HF model (called through its public forward, with its own
    KV cache), yet a float copy of a 1.5B target is 3-6 GB. So, like ``shallow_view`` in
    ``decoders/speculative/drafters.py``, the shell is built on the ``meta`` device from a copy of the
    config (no memory), and then filled: a submodule holding no Linear (embeddings, norms, rotary) is the
    target's own module object; a Linear becomes its quantized version; any other submodule is the shell's
    own instance of the same class with the target's direct parameters and buffers put in. Only the
    quantized weights are new memory; the target is not modified (no class is patched, nothing is
    re-tied). Anything left on ``meta`` afterwards is a one-line error. ``activations``: W8A8
    (:class:`Int8DynLinear`, int8 activations per token; 8 bits only).
    """
    if bits not in BITS:
        raise FastForwardError(f"weight-only quantization: bits must be one of {_join(BITS)}, got {bits}")
    if activations and bits != 8:
        raise FastForwardError(f"int8 activations need int8 weights (bits 8), got bits {bits}")
    if group_size not in INT4_GROUP_SIZES:
        raise FastForwardError(
            f"weight-only quantization: group_size must be one of {_join(INT4_GROUP_SIZES)}, got {group_size}"
        )
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    if not linears:
        raise FastForwardError(
            f"weight-only quantization: {type(model).__name__} has no nn.Linear to quantize "
            "(quantize the model as loaded, before another kernel path replaces its layers)"
        )
    for m in linears:
        _int8_kernel_check(m)  # before any work: a failure half-way would have cost the whole pass
    with torch.device("meta"):
        shell = type(model)(copy.deepcopy(model.config))
    _fill(model, shell, bits, group_size, compute_dtype, activations)
    left = [n for n, t in _tensors(shell) if t.is_meta]
    if left:
        raise FastForwardError(
            f"weight-only quantization: {type(model).__name__} has parts this copy does not share: "
            + ", ".join(left[:3])
        )
    if activations:
        rowwise(shell)
    return shell.eval()


def rowwise(model: nn.Module) -> bool:
    """Run a W8A8 model's attention row by row (:func:`fastforward.core.compiled.rowwise_attention`, through
    the registered attention of :func:`~fastforward.core.compiled.share_kv_heads`; a config flag, nothing
    patched). Returns whether it does: a model whose attention is not transformers' SDPA keeps its own.

    Why: int8 activations turn a last-bit difference between a 1-token and a k-token forward's attention
    into a different int8 input of the next layer, and then into different logits (up to 2.3 apart on
    SmolLM2). Everything else in a W8A8 forward is per token with exact integer products, so with attention
    row by row a token's logits have the same bits at every width, and what a forward verifies is exactly
    what the model's own greedy AR decodes, eager or compiled (compiled packages keep each row's sums on one
    thread: :func:`fastforward.core.aot.serial_row_chunk`; tested)."""
    from fastforward.core.compiled import ROWWISE, share_kv_heads

    setattr(model.config, ROWWISE, True)
    return share_kv_heads(model)


def _fill(
    src: nn.Module, dst: nn.Module, bits: int, group_size: int, compute_dtype: torch.dtype, activations: bool
) -> None:
    if type(src) is not type(dst):
        raise FastForwardError(
            f"weight-only quantization: the copy's {type(dst).__name__} does not mirror "
            f"the target's {type(src).__name__}"
        )
    dst._parameters = dict(src._parameters)  # the target's tensors, not copies
    dst._buffers = dict(src._buffers)
    dst._non_persistent_buffers_set = set(src._non_persistent_buffers_set)
    for name, child in src._modules.items():
        if child is None or isinstance(child, nn.Linear):
            new = (
                None
                if child is None
                else quantize_linear(child, bits, group_size, compute_dtype, activations)
            )
        elif not any(isinstance(m, nn.Linear) for m in child.modules()):
            new = child
        else:
            new = dst._modules.get(name)
            if new is None:
                raise FastForwardError(
                    f"weight-only quantization: the copy of {type(src).__name__} has no '{name}'"
                )
            _fill(child, new, bits, group_size, compute_dtype, activations)
        dst._modules[name] = new


def _tensors(model: nn.Module):
    """Every (name, tensor) a forward could read: parameters, buffers and plain tensor attributes."""
    yield from model.named_parameters(remove_duplicate=False)
    yield from model.named_buffers(remove_duplicate=False)
    for prefix, mod in model.named_modules(remove_duplicate=False):
        for key, value in vars(mod).items():
            if isinstance(value, torch.Tensor):
                yield f"{prefix}.{key}", value


def _join(values: tuple[int, ...]) -> str:
    return ", ".join(map(str, values))


def layer_kinds(model: nn.Module) -> dict[str, int]:
    """How many layers of each kind a model holds: ``{"int8": 1, "int4-g64": 168, "float": 0}``."""
    kinds: Counter[str] = Counter()
    for m in model.modules():
        if isinstance(m, Int4Linear):
            kinds[f"int4-g{m.group_size}"] += 1
        elif isinstance(m, Int8DynLinear):
            kinds["w8a8"] += 1
        elif isinstance(m, Int8Linear):
            kinds["int8"] += 1
        elif isinstance(m, nn.Linear):
            kinds["float"] += 1
    return dict(kinds)

"""Kernel paths: how the linear layers of a loaded model compute a forward over k new tokens on a CPU.

Parallel decoding wins or loses on the cost of the verify forward. For a model whose 1-token forward is
bound by reading its weights, a forward over k <= 16 tokens should cost about one weight read, i.e. about
the 1-token cost. torch's default CPU GEMM does not get there everywhere: on AVX2-only CPUs the multi-row
fp32/bf16 GEMM re-packs the weight matrix on every call, so an 8-token forward costs 3-11x a 1-token one.

Paths (``--path``):

- ``default``: the model as loaded (torch's dispatch; the fastest 1-token path for bf16 here).
- ``prepacked``: every ``nn.Linear`` becomes a :class:`PackedLinear` whose weight is reordered once into
  oneDNN's blocked layout (the kernel inductor emits for frozen CPU linears), twice: once tuned for one
  row (AR steps, drafting) and once for ``rows`` rows (verify forwards, prefill). float32 only on CPUs
  without avx512/avx_ne_convert (oneDNN refuses bf16 there); refused with one line otherwise.

This is a module swap done once after loading, like torch's own ``torch.utils.mkldnn.to_mkldnn`` or
weight-only quantization: the model keeps its class and public forward, and nothing is patched. The
prepared model is for inference only (the packed copies are not parameters and get no gradients).
"""

from __future__ import annotations

import torch
from torch import nn

from fastforward.core.aot import tensor_digest
from fastforward.errors import FastForwardError

PATHS = ("default", "prepacked")
VERIFY_ROWS = 8  # the row count the second packing is tuned for (typical verify block)


class PackedLinear(nn.Module):
    """An ``nn.Linear`` computed by oneDNN from weights reordered once, for 1 row and for ``rows`` rows.

    oneDNN picks its blocking from a batch-size hint at reorder time: the 1-row layout streams the weight
    at close to memory bandwidth, the ``rows`` layout keeps the multi-row GEMM from re-packing per call.
    Holding both costs one extra copy of the weights. The original ``weight`` is kept only when another
    module shares it (tied embeddings): a 1.5B fp32 model would not fit three copies in 24 GiB.
    """

    def __init__(self, linear: nn.Linear, rows: int = VERIFY_ROWS, keep_weight: bool = True) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight = linear.weight if keep_weight else None  # same Parameter: tied embeddings keep working
        self.bias = linear.bias
        w = linear.weight.detach()
        # the packed copies are no tensors of the state dict: this stands for them in a compiled package's
        # fingerprint (fastforward.core.aot), so two prepacked models with other weights never share one
        self.weight_digest = tensor_digest(w)
        self._one = torch.ops.mkldnn._reorder_linear_weight(w, 1)
        self._many = torch.ops.mkldnn._reorder_linear_weight(w, rows)
        self._bias = None if linear.bias is None else linear.bias.detach()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // self.in_features
        packed = self._one if rows == 1 else self._many
        return torch.ops.mkldnn._linear_pointwise(x, packed, self._bias, "none", [], "")

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, prepacked=oneDNN"


def _linears(model: nn.Module) -> list[tuple[nn.Module, str, nn.Linear]]:
    return [
        (parent, name, child)
        for parent in model.modules()
        for name, child in parent.named_children()
        if type(child) is nn.Linear
    ]


def check_path(path: str, dtype: torch.dtype) -> None:
    """One-line refusal for a path this torch build or CPU cannot run in ``dtype``."""
    if path not in PATHS:
        raise FastForwardError(f"unknown path '{path}'; choose one of {', '.join(PATHS)}")
    if path == "default":
        return
    if not torch.backends.mkldnn.is_available():
        raise FastForwardError("--path prepacked needs torch built with oneDNN (mkldnn); use --path default")
    try:  # oneDNN decides per ISA and dtype; a tiny trial says whether it runs here
        w = torch.ones(4, 4, dtype=dtype)
        packed = torch.ops.mkldnn._reorder_linear_weight(w, 1)
        torch.ops.mkldnn._linear_pointwise(torch.ones(1, 4, dtype=dtype), packed, None, "none", [], "")
    except RuntimeError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise FastForwardError(
            f"--path prepacked cannot run {str(dtype).removeprefix('torch.')} on this CPU ({first[:120]}); "
            "use --dtype float32 or --path default"
        ) from None


@torch.no_grad()
def prepare(model: nn.Module, path: str, rows: int = VERIFY_ROWS) -> nn.Module:
    """Switch ``model``'s linear layers to ``path`` in place and return it (``default`` changes nothing)."""
    dtype = next(model.parameters()).dtype
    check_path(path, dtype)
    if path == "default":
        return model
    if next(model.parameters()).device.type != "cpu":
        raise FastForwardError("--path prepacked is a CPU path; use --path default on other devices")
    linears = _linears(model)
    swapped = {id(linear) for _, _, linear in linears}
    shared = {  # weights some other module also holds (tied input/output embeddings)
        p.data_ptr() for m in model.modules() if id(m) not in swapped for p in m.parameters(recurse=False)
    }
    for parent, name, linear in linears:
        setattr(parent, name, PackedLinear(linear, rows, keep_weight=linear.weight.data_ptr() in shared))
    model.fastforward_path = path  # read by result files; a plain attribute, not config
    return model


def path_of(model: nn.Module) -> str:
    return getattr(model, "fastforward_path", "default")


class Fp32Head(nn.Module):
    """The LM head computed in float32 on a reduced-precision model: hidden states are cast up and scored
    against a float32 copy of the head, so logits that bf16 would round into a tie keep their order.

    Why: in bf16 most divergences of a multi-token method from AR are top-1/top-2 logits that round to the
    same value in one batch shape and not in the other; the head is where the rounding lands last. The copy
    costs vocab x hidden x 4 bytes (SmolLM2: 113 MB; Qwen2.5-1.5B: 0.9 GB)."""

    def __init__(self, head: nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = head.in_features, head.out_features
        self.weight = head.weight.detach().float()
        self.bias = None if head.bias is None else head.bias.detach().float()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.linear(x.float(), self.weight, self.bias)


def fp32_logits(model: nn.Module) -> nn.Module:
    """Compute ``model``'s logits in float32 (:class:`Fp32Head`); a no-op for a float32 model."""
    head = model.get_output_embeddings()
    if next(model.parameters()).dtype == torch.float32 or isinstance(head, Fp32Head):
        return model
    if not isinstance(head, nn.Linear):
        raise FastForwardError(
            f"fp32 logits need an nn.Linear LM head, {type(model).__name__} has {type(head).__name__}"
        )
    model.set_output_embeddings(Fp32Head(head))
    model.fastforward_fp32_logits = True
    return model

"""``--weights``: which weights the target runs with, and what each choice excludes. Torch-free, so the CLI
checks a conflicting command line before anything heavy is imported (:mod:`fastforward.cli.validate`), and
:func:`fastforward.models.loading.load_model` applies the same rule for library callers."""

from __future__ import annotations

# the bits of each choice: full = the weights as loaded in the run's dtype; int8 / int4 = every linear layer
# (LM head included) through torch's weight-only CPU kernels (:mod:`fastforward.models.quantize`); w8a8 =
# the int8 weights times each token's activations rounded to int8, through torch's int8 GEMM (``_int_mm``)
WEIGHTS = {"full": 0, "int8": 8, "int4": 4, "w8a8": 8}
ACTIVATIONS_INT8 = ("w8a8",)  # the choices that also round activations to int8
# why W8A8 (a target's or act8's draft) is refused on a CPU without VNNI, said the same way by each refusal
VNNI_NEEDED = (
    "needs VNNI (avx512_vnni or avx_vnni, and no ONEDNN_MAX_CPU_ISA cap below it): without it torch's int8 GEMM "
    "saturates"
)


def vnni_here() -> bool:
    """:func:`fastforward.core.int8_gemm.vnni_usable` for this process, imported when asked (it imports torch
    and inductor; this module stays torch-free for the CLI's early checks)."""
    from fastforward.core.int8_gemm import vnni_usable

    return vnni_usable()


def weights_error(
    weights: str, path: str, device: str, logits32: bool, vnni: bool | None = None
) -> str | None:
    """Why ``weights`` cannot run with this kernel path, device, LM-head choice and CPU (None when it can);
    ``vnni``: whether the CPU may run VNNI, None to ask this process (:func:`vnni_here`, only for W8A8 on a CPU).

    int8/int4 replace the linear layers by their own kernels, so they take no other kernel path; the
    kernels are CPU ones; the LM head is quantized with the rest, so a float32 head is a contradiction; and
    W8A8's int8 x int8 products are only right with VNNI: without it torch's int8 GEMM saturates pairs of
    products in int16, which would decode a different, damaged model rather than the one asked for."""
    if weights not in WEIGHTS:
        return f"unknown --weights '{weights}'; choose one of {', '.join(WEIGHTS)}"
    if weights == "full":
        return None
    if path not in ("default", "auto"):
        return (
            f"--weights {weights} replaces the linear layers by torch's {weights} kernels, so it takes no "
            f"kernel path: use --path default or auto, not {path}"
        )
    if not device.startswith("cpu"):
        return f"--weights {weights} runs torch's CPU kernels; on {device} use --weights full"
    if logits32:
        return f"--weights {weights} quantizes the LM head too; leave out --fp32-logits"
    if weights in ACTIVATIONS_INT8 and not (vnni_here() if vnni is None else vnni):
        return f"--weights {weights} {VNNI_NEEDED}; use --weights int8"
    return None

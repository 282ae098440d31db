"""Probe (issue 32, session 41): what SmolLM2-135M fp32's linear layers cost per step width on this CPU, GEMMs
only, through the kernels torch offers, timed in turns (one call of each variant per round, 25 rounds, the
first 3 dropped, medians), 2 threads. The weights are random, of the model's shapes (30 layers of q, k, v, o,
gate, up, down and the 49152 x 576 head: 0.54 GB, more than this CPU's L3, so every step streams them).

  mkl_M<k>: F.linear over the plain weight (what the compiled float32 packages run: ATen's GEMM, MKL);
  dnn8_M<k>: oneDNN's linear over the weight reordered once for 8 rows (torch.ops.mkldnn, as --path
    prepacked holds it); dnn16_M<k> the same reordered for 16 rows.

usage: python results/compiled_s41/gemm_rows.py   (prefix ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2
for the AVX2 cap)"""

import statistics as st
import time

import torch

torch.set_num_threads(2)
torch.manual_seed(0)
SHAPES = [(576, 576), (192, 576), (192, 576), (576, 576), (1536, 576), (1536, 576), (576, 1536)] * 30
SHAPES.append((49152, 576))
W = [torch.randn(n, k) for n, k in SHAPES]
P8 = [torch.ops.mkldnn._reorder_linear_weight(w, 8) for w in W]
P16 = [torch.ops.mkldnn._reorder_linear_weight(w, 16) for w in W]
X = {m: {k: torch.randn(m, k) for k in (576, 1536)} for m in (1, 2, 4, 8, 16)}


def mkl(m: int) -> None:
    for w in W:
        torch.nn.functional.linear(X[m][w.shape[1]], w)


def dnn(packed: list[torch.Tensor], m: int) -> None:
    for w, p in zip(W, packed, strict=True):
        torch.ops.mkldnn._linear_pointwise(X[m][w.shape[1]], p, None, "none", [], "")


VARIANTS = {f"mkl_M{m}": (lambda m=m: mkl(m)) for m in (1, 2, 4, 8, 16)}
VARIANTS |= {f"dnn8_M{m}": (lambda m=m: dnn(P8, m)) for m in (1, 2, 4, 8, 16)}
VARIANTS |= {f"dnn16_M{m}": (lambda m=m: dnn(P16, m)) for m in (8, 16)}
times: dict[str, list[float]] = {k: [] for k in VARIANTS}
for _ in range(25):
    for name, fn in VARIANTS.items():
        t = time.perf_counter()
        fn()
        times[name].append((time.perf_counter() - t) * 1e3)
med = {k: st.median(v[3:]) for k, v in times.items()}
print(f"torch {torch.__version__}, capability {torch.backends.cpu.get_cpu_capability()}")
for name, ms in med.items():
    print(f"{name:10s} {ms:6.1f} ms  {ms / med['mkl_M1']:.2f}x mkl_M1")

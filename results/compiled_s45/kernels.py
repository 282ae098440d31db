"""One-row GEMM kernels on this CPU (session 45), streamed over many distinct matrices as in a model step.
   python results/compiled_s45/kernels.py bf16        bf16, 1 row: F.linear, oneDNN prepacked, ATen with oneDNN off
   python results/compiled_s45/kernels.py bf16-rows   bf16: torch.mv with oneDNN on; 8 rows, oneDNN prepacked vs ATen
   python results/compiled_s45/kernels.py int8        int8 weight-only (_weight_int8pack_mm), 1 row, the 1.5B's
                                                      shapes, bf16 vs fp32 activations
The lines in kernels.txt came from three scripts with these bodies (gemv_bf16.py, gemv_bf16_rows.py,
woq_int8.py), merged here afterwards into one file with one timer (the same median timer as
results/compiled_s44/mm.py, which runs its own measurement when imported)."""
import sys
import time

import torch

torch.set_num_threads(2)
onednn = torch.ops.mkldnn._linear_pointwise


def t(f, n, warm):
    """Median microseconds of ``n`` calls of ``f`` after ``warm`` unmeasured ones."""
    for _ in range(warm):
        f()
    ts = []
    for _ in range(n):
        a = time.perf_counter()
        f()
        ts.append(time.perf_counter() - a)
    return sorted(ts)[n // 2] * 1e6


def bf16_matrices(K, N):
    reps = max(1, 300_000_000 // (K * N * 2))
    Ws = [torch.randn(N, K).to(torch.bfloat16) for _ in range(reps)]
    return reps, Ws, [torch.ops.mkldnn._reorder_linear_weight(W, 1) for W in Ws], K * N * 2 / 1e3


def bf16_one_row():
    for K, N in [(576, 1536), (1536, 576), (576, 49152)]:
        reps, Ws, packed, gb = bf16_matrices(K, N)
        x = torch.randn(1, K).to(torch.bfloat16)
        with torch.no_grad():
            a = t(lambda: [torch.nn.functional.linear(x, W) for W in Ws], 60, 5) / reps
            c = t(lambda: [onednn(x, W, None, "none", [], "") for W in packed], 60, 5) / reps
            with torch.backends.mkldnn.flags(enabled=False):
                d = t(lambda: [torch.nn.functional.linear(x, W) for W in Ws], 60, 5) / reps
                e = t(lambda: [torch.mv(W, x[0]) for W in Ws], 60, 5) / reps
                ref = torch.nn.functional.linear(x, Ws[0])
            got = onednn(x, packed[0], None, "none", [], "")
            same = torch.allclose(ref.float(), got.float(), atol=1e-2, rtol=1e-2)
        print(f"{K}x{N} bf16 M=1 (x{reps}): F.linear {gb/a:.1f} GB/s | onednn prepacked {gb/c:.1f} | F.linear mkldnn off "
              f"{gb/d:.1f} | mv mkldnn off {gb/e:.1f} GB/s | close {same}", flush=True)


def bf16_rows():
    for K, N in [(576, 1536), (1536, 576), (576, 49152)]:
        reps, Ws, packed, gb = bf16_matrices(K, N)
        x = torch.randn(1, K).to(torch.bfloat16)
        x8 = torch.randn(8, K).to(torch.bfloat16)
        with torch.no_grad():
            mv_on = t(lambda: [torch.mv(W, x[0]) for W in Ws], 40, 5) / reps
            p8 = t(lambda: [onednn(x8, W, None, "none", [], "") for W in packed], 40, 5) / reps
            with torch.backends.mkldnn.flags(enabled=False):
                off8 = t(lambda: [torch.nn.functional.linear(x8, W) for W in Ws], 20, 3) / reps
        print(f"{K}x{N}: mv mkldnn on {gb/mv_on:.1f} GB/s | M=8 onednn prepacked {p8:.0f} us | M=8 F.linear mkldnn off "
              f"{off8:.0f} us", flush=True)


def int8_one_row():
    for K, N in [(1536, 8960), (8960, 1536), (1536, 151936)]:
        reps = max(1, 400_000_000 // (K * N))
        Ws = [torch.randint(-127, 127, (N, K), dtype=torch.int8) for _ in range(reps)]
        scales = torch.rand(N) * 0.01
        gb = K * N / 1e3
        out = []
        for dt in (torch.bfloat16, torch.float32):
            x, s = torch.randn(1, K).to(dt), scales.to(dt)
            us = t(lambda: [torch._weight_int8pack_mm(x, W, s) for W in Ws], 30, 3) / reps
            out.append(f"{dt} {gb/us:.1f} GB/s")
        print(f"int8 {K}x{N} M=1 (x{reps}): " + " | ".join(out), flush=True)


MODES = {"bf16": bf16_one_row, "bf16-rows": bf16_rows, "int8": int8_one_row}
if __name__ == "__main__":
    if sys.argv[1:2] not in ([m] for m in MODES):
        sys.exit(f"usage: kernels.py {{{'|'.join(MODES)}}}")
    MODES[sys.argv[1]]()

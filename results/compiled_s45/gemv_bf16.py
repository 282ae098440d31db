"""bf16 1-row GEMMs over distinct matrices (streamed): oneDNN prepacked vs ATen's own bf16 gemv (mkldnn off)
vs fp32 MKL for reference."""
import sys, time
import torch
torch.set_num_threads(2)
onednn = torch.ops.mkldnn._linear_pointwise

def t(f, n, warm):
    for _ in range(warm): f()
    ts = []
    for _ in range(n):
        a = time.perf_counter(); f(); ts.append(time.perf_counter() - a)
    return sorted(ts)[n // 2] * 1e6

for (K, N) in [(576, 1536), (1536, 576), (576, 49152)]:
    reps = max(1, 300_000_000 // (K * N * 2))
    Ws = [torch.randn(N, K).to(torch.bfloat16) for _ in range(reps)]
    packed = [torch.ops.mkldnn._reorder_linear_weight(W, 1) for W in Ws]
    x = torch.randn(1, K).to(torch.bfloat16)
    gb = K * N * 2 / 1e3
    with torch.no_grad():
        a = t(lambda: [torch.nn.functional.linear(x, W) for W in Ws], 60, 5) / reps
        c = t(lambda: [onednn(x, W, None, "none", [], "") for W in packed], 60, 5) / reps
        with torch.backends.mkldnn.flags(enabled=False):
            d = t(lambda: [torch.nn.functional.linear(x, W) for W in Ws], 60, 5) / reps
            e = t(lambda: [torch.mv(W, x[0]) for W in Ws], 60, 5) / reps
            ref = torch.nn.functional.linear(x, Ws[0])
        same = torch.allclose(ref.float(), onednn(x, packed[0], None, "none", [], "").float(), atol=1e-2, rtol=1e-2)
    print(f"{K}x{N} bf16 M=1 (x{reps}): F.linear {gb/a:.1f} GB/s | onednn prepacked {gb/c:.1f} | F.linear mkldnn off {gb/d:.1f} | mv mkldnn off {gb/e:.1f} GB/s | close {same}", flush=True)

"""int8 weight-only GEMM (torch._weight_int8pack_mm) at 1 row over distinct matrices of the 1.5B shapes, bf16 vs fp32 activations (session 45)."""
import time, torch
torch.set_num_threads(2)
def t(f, n, warm):
    for _ in range(warm): f()
    ts = []
    for _ in range(n):
        a = time.perf_counter(); f(); ts.append(time.perf_counter() - a)
    return sorted(ts)[n // 2] * 1e6
for (K, N) in [(1536, 8960), (8960, 1536), (1536, 151936)]:
    reps = max(1, 400_000_000 // (K * N))
    Ws = [torch.randint(-127, 127, (N, K), dtype=torch.int8) for _ in range(reps)]
    sc = torch.rand(N) * 0.01
    gb = K * N / 1e3
    out = []
    for dt in (torch.bfloat16, torch.float32):
        x = torch.randn(1, K).to(dt)
        s = sc.to(dt)
        us = t(lambda: [torch._weight_int8pack_mm(x, W, s) for W in Ws], 30, 3) / reps
        out.append(f"{dt} {gb/us:.1f} GB/s")
    print(f"int8 {K}x{N} M=1 (x{reps}): " + " | ".join(out), flush=True)

"""This CPU's attainable GEMM rate (torch's matmul, 2 threads): a large square product in float32 and bf16,
medians of 5, and the memory rate of a large copy; the floors they put under a forward's time."""
import time

import torch

torch.set_num_threads(2)


def med(fn, reps=5):
    fn()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return sorted(ts)[len(ts) // 2]


n = 2048
for dtype in (torch.float32, torch.bfloat16):
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    s = med(lambda: a @ b)
    print(f"{dtype} {n}^3 matmul: {s * 1e3:.1f} ms, {2 * n**3 / s / 1e9:.0f} GFLOP/s")
x = torch.empty(2 << 28, dtype=torch.uint8)  # 512 MiB
y = torch.empty_like(x)
s = med(lambda: y.copy_(x))
print(f"copy 512 MiB: {s * 1e3:.1f} ms, {2 * x.numel() / s / 1e9:.1f} GB/s (read + write)")

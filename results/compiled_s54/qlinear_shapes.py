"""Per GEMM shape: aten._int_mm against oneDNN's prepacked int8 linear (activations already uint8, as the
compiled graph fuses the shift into the quantize kernel), eager, 2 threads, medians of 30 calls, for 1-8 rows:
which weights the rewrite of core.int8_gemm pays on. python qlinear_shapes.py"""
import time

import torch

torch.set_num_threads(2)
SHAPES = {  # (K, N) of each linear
    "smollm2 qkv/o 576x576": (576, 576), "smollm2 up 576x1536": (576, 1536), "smollm2 down 1536x576": (1536, 576),
    "smollm2 head 576x49152": (576, 49152), "1.5B q/o 1536x1536": (1536, 1536), "1.5B k/v 1536x256": (1536, 256),
    "1.5B up 1536x8960": (1536, 8960), "1.5B down 8960x1536": (8960, 1536), "1.5B head 1536x151936": (1536, 151936),
}


def med(fn, n=30):
    for _ in range(3):
        fn()
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return sorted(ts)[n // 2] * 1e3


for name, (k, n) in SHAPES.items():
    w = torch.randint(-127, 128, (n, k), dtype=torch.int8)
    wt = w.t()
    packed = torch.ops.onednn.qlinear_prepack(w, None)
    ones, zeros = torch.ones(n), torch.zeros(n, dtype=torch.int32)
    row = []
    for m in (1, 2, 4, 8):
        x = torch.randint(-127, 128, (m, k), dtype=torch.int8)
        u8 = (x.to(torch.int16) + 128).to(torch.uint8)
        a = med(lambda: torch._int_mm(x, wt))
        b = med(lambda: torch.ops.onednn.qlinear_pointwise(u8, 1.0, 128, packed, ones, zeros, None, 1.0, 0, torch.float32, "none", [], ""))
        row.append(f"m{m} {a:.3f}/{b:.3f}")
    print(f"{name} (K*N {k * n / 1e6:.2f}M): _int_mm/qlinear ms " + ", ".join(row), flush=True)

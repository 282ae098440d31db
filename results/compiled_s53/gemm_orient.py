"""aten._int_mm for a W8A8 linear, two ways round, per token count m: x [m, K] @ W^T (the weights as the right
operand, a [K, N] view of the [N, K] rows: what Int8DynLinear runs) against W [N, K] @ x^T (the weights as the left
operand), the product transposed back. Integer products: the same values either way (checked). Median ms of a
forward's worth of a model's GEMMs. python gemm_orient.py MODEL"""
import sys
import time

import torch

torch.set_num_threads(2)
shapes = {
    "qwen2.5-coder-1.5b": (28, [(1536, 2048), (1536, 1536), (1536, 17920), (8960, 1536)], (1536, 151936)),
    "smollm2-135m": (30, [(576, 960), (576, 576), (576, 3072), (1536, 576)], (576, 49152)),
}
layers, per_layer, head = shapes[sys.argv[1]]
mats = per_layer + [head]
ws = [torch.randint(-127, 128, (n, k), dtype=torch.int8) for k, n in mats]  # [N, K] rows
for m in (1, 2, 4, 8, 16):
    xs = [torch.randint(-127, 128, (m, k), dtype=torch.int8) for k, _ in mats]
    for a, b in zip(xs, ws):
        assert torch.equal(torch._int_mm(a, b.t()), torch._int_mm(b, a.t()).t())

    def right():
        for i in range(layers):
            for x, w in zip(xs[:-1], ws[:-1]):
                torch._int_mm(x, w.t())
        torch._int_mm(xs[-1], ws[-1].t())

    def left():
        for i in range(layers):
            for x, w in zip(xs[:-1], ws[:-1]):
                torch._int_mm(w, x.t())
        torch._int_mm(ws[-1], xs[-1].t())

    out = []
    for name, fn in (("x @ W^T", right), ("W @ x^T", left)):
        fn()
        times = []
        for _ in range(5):
            t = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t) * 1e3)
        out.append(f"{name} {sorted(times)[2]:.1f} ms")
    print(f"{sys.argv[1]} m={m}: " + ", ".join(out), flush=True)

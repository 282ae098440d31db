"""oneDNN's prepacked int8 linear (u8 activations with zero point 128, s8 weights, fp32 out, scales 1) against
aten._int_mm, on the 1.5B's (or SmolLM2's) GEMMs: same integers? ms per forward's worth. python qlinear.py MODEL"""
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
ws = [torch.randint(-127, 128, (n, k), dtype=torch.int8) for k, n in mats]  # [N, K]
packed = [torch.ops.onednn.qlinear_prepack(w, None) for w in ws]
ones = [torch.ones(w.shape[0]) for w in ws]
zeros = [torch.zeros(w.shape[0], dtype=torch.int64) for w in ws]


def q(x8, i):
    u8 = (x8.to(torch.int16) + 128).to(torch.uint8)
    return torch.ops.onednn.qlinear_pointwise(u8, 1.0, 128, packed[i], ones[i], zeros[i], None, 1.0, 0, torch.float32, "none", [], "")


for m in (1, 2, 4, 8):
    xs = [torch.randint(-127, 128, (m, k), dtype=torch.int8) for k, _ in mats]
    for i, (x, w) in enumerate(zip(xs, ws)):
        ref = torch._int_mm(x, w.t()).float()
        got = q(x, i)
        assert torch.equal(ref, got), (m, i, (ref - got).abs().max())

    def intmm():
        for _ in range(layers):
            for x, w in zip(xs[:-1], ws[:-1]):
                torch._int_mm(x, w.t())
        torch._int_mm(xs[-1], ws[-1].t())

    def qlin():
        for _ in range(layers):
            for i, x in enumerate(xs[:-1]):
                q(x, i)
        q(xs[-1], len(xs) - 1)

    out = []
    for name, fn in (("_int_mm", intmm), ("qlinear", qlin)):
        fn()
        times = []
        for _ in range(5):
            t = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t) * 1e3)
        out.append(f"{name} {sorted(times)[2]:.1f} ms")
    print(f"{sys.argv[1]} m={m}: " + ", ".join(out), flush=True)

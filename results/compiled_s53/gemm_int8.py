"""The 1.5B's (or SmolLM2's) int8 GEMMs through aten._int_mm, per token count: ms per forward's worth of them
(every linear of every layer + LM head), eager calls, 2 threads. python gemm.py MODEL"""
import sys, time, torch
torch.set_num_threads(2)
shapes = {
    "qwen2.5-coder-1.5b": (28, [(1536, 1536 + 2 * 256), (1536, 1536), (1536, 2 * 8960), (8960, 1536)], (1536, 151936)),
    "smollm2-135m": (30, [(576, 576 + 2 * 192), (576, 576), (576, 2 * 1536), (1536, 576)], (576, 49152)),
}
layers, per_layer, head = shapes[sys.argv[1]]
ws = [torch.randint(-127, 128, (n, k), dtype=torch.int8).t() for k, n in per_layer]  # [k, n] column-major, as Int8DynLinear
wh = torch.randint(-127, 128, (head[1], head[0]), dtype=torch.int8).t()
for m in (1, 2, 4, 8, 16):
    xs = [torch.randint(-127, 128, (m, k), dtype=torch.int8) for k, _ in per_layer]
    xh = torch.randint(-127, 128, (m, head[0]), dtype=torch.int8)
    def run():
        for _ in range(layers):
            for x, w in zip(xs, ws):
                torch._int_mm(x, w)
        torch._int_mm(xh, wh)
    for _ in range(2): run()
    best = []
    for _ in range(5):
        t = time.perf_counter(); run(); best.append((time.perf_counter() - t) * 1e3)
    best.sort()
    print(f"{sys.argv[1]} m={m}: median {best[2]:.1f} ms of int8 GEMMs per forward", flush=True)

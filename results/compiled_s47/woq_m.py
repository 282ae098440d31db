"""Probe: inductor CPP template int8 WOQ GEMM, per-layer ms by M; FORCE4=1 removes the 8-row small-M config."""
import os, time, torch, torch.nn as nn
import torch._inductor.config as ic
torch.set_num_threads(2); torch.manual_seed(0)
if os.environ.get("FORCE4"):
    import torch._inductor.compile_fx
    import torch._inductor.codegen.cpp_micro_gemm as mg
    for cls, cfgs in mg.micro_gemm_configs.items():
        mg.micro_gemm_configs[cls] = [c for c in cfgs if not (c.input2_dtype == torch.int8 and c.register_blocking.block_m == 8 and c.register_blocking.block_k == 64)]
ic.freezing = True; ic.max_autotune = True; ic.max_autotune_gemm_backends = os.environ.get("GEMM", "CPP")
N, K, L = int(os.environ.get("N", 8960)), int(os.environ.get("K", 1536)), 12
class Q(nn.Module):
    def __init__(s):
        super().__init__()
        for i in range(L):
            s.register_buffer(f"w{i}", torch.randint(-127, 128, (N, K), dtype=torch.int8))
        s.register_buffer("sc", torch.rand(N, dtype=torch.bfloat16) / 100)
    def forward(s, x):
        out = 0
        for i in range(L):
            out = out + torch.ops.aten._weight_int8pack_mm(x, getattr(s, f"w{i}"), s.sc)
        return out
m = Q().eval()
for M in [int(v) for v in os.environ.get("MS", "4,8,12,16").split(",")]:
    x = torch.randn(M, K, dtype=torch.bfloat16)
    torch._dynamo.reset()
    with torch.no_grad():
        f = torch.compile(m)
        f(x); f(x)
        ts = []
        for _ in range(10):
            a = time.perf_counter(); f(x); ts.append(time.perf_counter() - a)
    ts.sort()
    print(f"N={N} K={K} M={M} force4={bool(os.environ.get('FORCE4'))} gemm={ic.max_autotune_gemm_backends}: {ts[5]*1e3/L:.3f} ms/layer", flush=True)

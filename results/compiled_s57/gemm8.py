"""Per-GEMM cost of x[M,576] @ W[576,1536] over 30 distinct weights (106 MB, beyond the 48 MB L3), as a
decode step streams them: eager MKL (torch.mm over W^T contiguous / nn.Linear), oneDNN packed linear,
and a compiled chain (CPP templates / ATEN), M = 1, 2, 4, 8."""
import sys, time, torch
torch.set_num_threads(2)
L, K, N = 30, 576, 1536
torch.manual_seed(0)
lins = torch.nn.ModuleList(torch.nn.Linear(K, N, bias=False) for _ in range(L)).eval().requires_grad_(False)
class Chain(torch.nn.Module):
    def __init__(s, lins): super().__init__(); s.lins = lins
    def forward(s, x):
        return tuple(l(x) for l in s.lins)
chain = Chain(lins).eval()
def bench(f, x, reps=15):
    for _ in range(3): f(x)
    ts = []
    for _ in range(reps):
        t = time.perf_counter(); f(x); ts.append((time.perf_counter() - t) * 1e6 / L)
    return sorted(ts)[reps // 2]
which = sys.argv[1].split(",")
Ms = [int(m) for m in sys.argv[2].split(",")]
with torch.no_grad():
    comp = {}
    for w in which:
        if w in ("CPP", "ATEN"):
            comp[w] = torch.compile(Chain(lins).eval(), options={"freezing": True, "max_autotune": True, "max_autotune_gemm_backends": w}, dynamic=False)
    for M in Ms:
        x = torch.randn(M, K)
        row = [f"M={M}"]
        for w in which:
            if w == "eager": f = chain
            else: f = comp[w]
            row.append(f"{w} {bench(f, x):6.1f}us")
        print("  ".join(row), flush=True)

"""Session 46, EPYC: int8 GEMMs streamed from memory (L layers of distinct matrices, more than the L3), per layer: torch's weight-only kernel (woq, bf16 activations) against int8 x int8 (torch._int_mm, per-token activation scales: a8 with the quantize and scale steps, a8raw the GEMM alone)."""
import time, torch
torch.manual_seed(0)
L=12
def t(f, n=8):
    f()
    ts=[]
    for _ in range(n):
        a=time.perf_counter(); f(); ts.append(time.perf_counter()-a)
    ts.sort(); return ts[len(ts)//2]*1e3/L
for N,K in [(8960,1536),(1536,8960)]:
    ws=[torch.randint(-127,128,(N,K),dtype=torch.int8) for _ in range(L)]
    s=torch.rand(N,dtype=torch.bfloat16); sf=torch.rand(N)
    wts=[w.t() for w in ws]
    for M in (1,2,4,8,16):
        xb=torch.randn(M,K,dtype=torch.bfloat16); xf=torch.randn(M,K)
        def woq():
            for w in ws: torch.ops.aten._weight_int8pack_mm(xb,w,s)
        def a8():
            for w in wts:
                a=xf.abs().amax(1,keepdim=True)/127
                q=(xf/a).round().to(torch.int8)
                (torch._int_mm(q,w).float()*a*sf)
        def a8raw():
            q=torch.randint(-127,128,(M,K),dtype=torch.int8)
            for w in wts: torch._int_mm(q,w)
        print(f"N={N} K={K} M={M} woq {t(woq):.3f} a8 {t(a8):.3f} a8raw {t(a8raw):.3f} ms/layer  ({N*K/1e6:.1f} MB)", flush=True)

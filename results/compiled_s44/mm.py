import time, torch
torch.set_num_threads(2)
def t(f, n=200):
    for _ in range(20): f()
    ts=[]
    for _ in range(n):
        a=time.perf_counter(); f(); ts.append(time.perf_counter()-a)
    return sorted(ts)[n//2]*1e6
for (K,N) in [(576,1536),(1536,576),(576,49152)]:
    W=torch.randn(N,K)
    packed=torch.ops.mkldnn._reorder_linear_weight(W, None) if hasattr(torch.ops.mkldnn,'_reorder_linear_weight') else None
    for M in (1,8):
        x=torch.randn(M,K)
        with torch.no_grad():
            a=t(lambda: torch.mm(x,W.t()))
            b=t(lambda: torch.nn.functional.linear(x,W))
            c=t(lambda: torch.ops.mkldnn._linear_pointwise(x, W, None, "none", [], ""))
        print(K,N,"M",M,"mm %.0f us"%a, "F.linear %.0f us"%b, "mkldnn(plain W) %.0f us"%c, "mm GB/s %.1f"%(K*N*4/a/1e3), flush=True)

import time, torch
torch.set_num_threads(2)
def t(f, n=100):
    for _ in range(10): f()
    ts=[]
    for _ in range(n):
        a=time.perf_counter(); f(); ts.append(time.perf_counter()-a)
    return sorted(ts)[n//2]*1e6
# many distinct matrices so they stream from memory, as in a model step (30 layers x 7 GEMMs)
for (K,N) in [(576,1536),(576,49152)]:
    reps = max(1, 300_000_000 // (K*N*2))
    Ws=[torch.randn(N,K).to(torch.bfloat16) for _ in range(reps)]
    packed=[torch.ops.mkldnn._reorder_linear_weight(W, 1) for W in Ws] if hasattr(torch.ops.mkldnn, "_reorder_linear_weight") else None
    x=torch.randn(1,K).to(torch.bfloat16)
    with torch.no_grad():
        a=t(lambda: [torch.nn.functional.linear(x,W) for W in Ws])/reps
        b=t(lambda: [torch.ops.mkldnn._linear_pointwise(x, W, None, "none", [], "") for W in Ws])/reps
        c=t(lambda: [torch.ops.mkldnn._linear_pointwise(x, W, None, "none", [], "") for W in packed])/reps if packed else float('nan')
    gb=K*N*2/1e3
    print(f"{K}x{N} bf16 M=1 (x{reps} distinct): F.linear {a:.0f} us {gb/a:.1f} GB/s | mkldnn plain {b:.0f} us {gb/b:.1f} GB/s | mkldnn prepacked {c:.0f} us {gb/c:.1f} GB/s", flush=True)

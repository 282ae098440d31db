"""bf16 at 1 and 8 rows: torch.mv with oneDNN on, and 8-row GEMMs through oneDNN prepacked vs ATen with oneDNN off (session 45)."""
import time, torch
torch.set_num_threads(2)
onednn = torch.ops.mkldnn._linear_pointwise
def t(f, n, warm):
    for _ in range(warm): f()
    ts = []
    for _ in range(n):
        a = time.perf_counter(); f(); ts.append(time.perf_counter() - a)
    return sorted(ts)[n // 2] * 1e6
for (K, N) in [(576, 1536), (1536, 576), (576, 49152)]:
    reps = max(1, 300_000_000 // (K * N * 2))
    Ws = [torch.randn(N, K).to(torch.bfloat16) for _ in range(reps)]
    packed = [torch.ops.mkldnn._reorder_linear_weight(W, 1) for W in Ws]
    gb = K * N * 2 / 1e3
    x = torch.randn(1, K).to(torch.bfloat16)
    with torch.no_grad():
        mv_on = t(lambda: [torch.mv(W, x[0]) for W in Ws], 40, 5) / reps
        x8 = torch.randn(8, K).to(torch.bfloat16)
        p8 = t(lambda: [onednn(x8, W, None, "none", [], "") for W in packed], 40, 5) / reps
        with torch.backends.mkldnn.flags(enabled=False):
            off8 = t(lambda: [torch.nn.functional.linear(x8, W) for W in Ws], 20, 3) / reps
    print(f"{K}x{N}: mv mkldnn on {gb/mv_on:.1f} GB/s | M=8 onednn prepacked {p8:.0f} us | M=8 F.linear mkldnn off {off8:.0f} us", flush=True)

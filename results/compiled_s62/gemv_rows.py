import time, torch
torch.set_num_threads(2)
def med(fn, n=7):
    fn()
    ts=[]
    for _ in range(n):
        t=time.perf_counter(); fn(); ts.append(time.perf_counter()-t)
    return sorted(ts)[n//2]
for (k, n) in ((1536, 8960), (8960, 1536)):
    L = 28
    w8 = [torch.randint(-127, 128, (n, k), dtype=torch.int8) for _ in range(L)]
    x8 = torch.randint(-127, 128, (1, k), dtype=torch.int8)
    u8 = (x8.to(torch.int16) + 128).to(torch.uint8)
    ones = torch.ones(n); zeros = torch.zeros(n, dtype=torch.int32)
    packed = [torch.ops.onednn.qlinear_prepack(w, None) for w in w8]
    gb = L*n*k/1e9
    for m, zp in ((1, 128), (1, 0), (2, 0), (4, 0), (8, 0), (8, 128)):
        x = u8.expand(m, k).contiguous()
        t = med(lambda: [torch.ops.onednn.qlinear_pointwise(x, 1.0, zp, p, ones, zeros, None, 1.0, 0, torch.float32, "none", [], "") for p in packed])
        print(f"K={k} N={n} m={m} zp={zp}: {t*1e3/L:.3f} ms/layer {gb/t:.1f} GB/s")
    for m in (1, 8):
        x = x8.expand(m,k).contiguous() if m>1 else x8
        if m > 1: x = torch.randint(-127,128,(m,k),dtype=torch.int8)
        t = med(lambda: [torch._int_mm(x, w.t()) for w in w8])
        print(f"K={k} N={n} m={m} _int_mm: {t*1e3/L:.3f} ms/layer {gb/t:.1f} GB/s")

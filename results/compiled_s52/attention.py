import time, torch, sys
import fastforward.core.compiled as C
torch.set_num_threads(2)
from torch._inductor import config
config.freezing = True
hq, hkv, d, S = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), 512
def variants():
    return {"grouped": C.grouped_attention, "rowwise": C.rowwise_attention}
for q in (1, 8):
    query = torch.randn(1, hq, q, d); key = torch.randn(1, hkv, S, d); value = torch.randn(1, hkv, S, d)
    mask = (torch.arange(S)[None, :] <= torch.arange(200 - q, 200)[:, None])[None, None]
    for name, fn in variants().items():
        f = torch.compile(fn, dynamic=False)
        with torch.no_grad():
            for _ in range(3): f(query, key, value, mask)
            t = time.perf_counter()
            for _ in range(200): f(query, key, value, mask)
        print(f"q={q} {name}: {(time.perf_counter()-t)/200*1e3:.3f} ms per layer call", flush=True)

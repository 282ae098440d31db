"""Scratch: SmolLM2 fp32 shared-weights packages of session 35 (62fd...) vs this session's (49ff...), one process."""
import time, statistics as st, torch
from pathlib import Path
from fastforward.core import aot
torch.set_num_threads(2)
S = Path.home()/".cache/fastforward/compiled"
def inputs(k):
    g = torch.Generator().manual_seed(k)
    ids = torch.randint(0, 49000, (1, k), generator=g); pos = torch.arange(100, 100+k)[None]
    mask = torch.zeros(1, 1, k, 512, dtype=torch.bool); mask[..., :100+k] = True
    return ids, pos, mask, torch.arange(100, 100+k)
kv = [torch.randn(1, 3, 512, 64) for _ in range(60)]
stores = {n: {k: aot.load(S/n/f"k{k}-s512.pt2") for k in (1, 8)} for n in ("62fd5062cca88bce", "49ffc58d90594782")}
for rep in range(3):
    for n, p in stores.items():
        for k in (1, 8):
            f = p[k]; X = inputs(k)
            for _ in range(3): f(*X, *kv)
            ts = []
            for _ in range(15):
                t = time.perf_counter(); f(*X, *kv); ts.append((time.perf_counter()-t)*1e3)
            print(rep, n, f"k{k}", round(st.median(ts), 1), flush=True)

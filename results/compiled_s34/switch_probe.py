"""Width-switch cost of compiled packages: per-bucket weight copies (old store) vs shared weights (new)."""
import sys, time, torch, statistics as st
from pathlib import Path
from fastforward.core import aot
torch.set_num_threads(2)
store = Path.home()/".cache/fastforward/compiled"/sys.argv[1]
def inputs(k):
    g = torch.Generator().manual_seed(k)
    ids = torch.randint(0, 49000, (1, k), generator=g); pos = torch.arange(100, 100+k)[None]
    mask = torch.zeros(1, 1, k, 512, dtype=torch.bool); mask[..., :100+k] = True
    return ids, pos, mask, torch.arange(100, 100+k)
kv = [torch.zeros(1, 3, 512, 64) for _ in range(60)]
P = {k: aot.load(store/f"k{k}-s512.pt2") for k in (1, 2, 8, 16)}
X = {k: inputs(k) for k in P}
def call(k):
    t0=time.perf_counter(); P[k](*X[k], *kv); return (time.perf_counter()-t0)*1e3
for k in P: [call(k) for _ in range(3)]
res = {}
for rep in range(5):
    for n in (1, 3, 10):
        for other in (2, 8, 16):
            [call(1) for _ in range(6)]
            [call(other) for _ in range(n)]
            res.setdefault(f"k{other} x{n} -> k1 first", []).append(call(1))
    [call(1) for _ in range(6)]; time.sleep(0.2)
    res.setdefault("sleep 0.2 s -> k1 first", []).append(call(1))
    [call(1) for _ in range(6)]
    res.setdefault("k1 steady", []).append(call(1))
    for o in (2, 8, 16):
        [call(o) for _ in range(6)]
        res.setdefault(f"k{o} steady", []).append(call(o))
    [call(1) for _ in range(6)]
    res.setdefault("k1 x6 -> k8 first", []).append(call(8))
print(f"store {sys.argv[1]} ({'shared weights' if aot.shares_weights(store/'k1-s512.pt2') else 'a weight copy per package'})")
for k, v in res.items(): print(f"  {k:26s} median {st.median(v):5.0f} ms   all {' '.join(f'{x:.0f}' for x in v)}")

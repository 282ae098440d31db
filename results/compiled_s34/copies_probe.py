"""Two loaded copies of the same 1-token package (A, B) and the 2-token one (C2): the first A step after n steps of another."""
import time, torch, statistics as st
from pathlib import Path
from fastforward.core import aot
torch.set_num_threads(2)
store = Path.home()/".cache/fastforward/compiled/df5c77fa00716add"
def inputs(k):
    ids = torch.randint(0, 49000, (1, k)); pos = torch.arange(100, 100+k)[None]
    mask = torch.zeros(1, 1, k, 512, dtype=torch.bool); mask[..., :100+k] = True
    return ids, pos, mask, torch.arange(100, 100+k)
kv = [torch.zeros(1, 3, 512, 64) for _ in range(60)]
P = {"A": aot.load(store/"k1-s512.pt2"), "B": aot.load(store/"k1-s512.pt2"), "C2": aot.load(store/"k2-s512.pt2")}
X = {"A": inputs(1), "B": inputs(1), "C2": inputs(2)}
def call(k):
    t0=time.perf_counter(); P[k](*X[k], *kv); return (time.perf_counter()-t0)*1e3
for k in P: [call(k) for _ in range(3)]
res={}
for rep in range(6):
    for other in ("B", "C2"):
        for n in (3, 10, 20):
            [call("A") for _ in range(6)]
            [call(other) for _ in range(n)]
            res.setdefault(f"{other} x{n} -> A first", []).append(call("A"))
    [call("A") for _ in range(6)]
    res.setdefault("A steady", []).append(call("A"))
for k, v in res.items(): print(f"{k:20s} median {st.median(v):.0f}  all {' '.join(f'{x:.0f}' for x in v)}")

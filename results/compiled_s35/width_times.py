import sys, time, torch, statistics as st
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
dyn = aot.load(Path("/tmp/dyn/kdyn.pt2"))
shared = {k: aot.load(S/"62fd5062cca88bce"/f"k{k}-s512.pt2") for k in (1, 2, 4, 8, 16)}
copies = {k: aot.load(S/"df5c77fa00716add"/f"k{k}-s512.pt2") for k in (1, 2, 4, 8, 16)}
X = {k: inputs(k) for k in (1, 2, 4, 8, 16)}
def call(f, k):
    t0 = time.perf_counter(); out = f(*X[k], *kv); return (time.perf_counter()-t0)*1e3, out
# agreement
for k in (2, 8, 16):
    a = call(dyn, k)[1][0]; b = call(shared[k], k)[1][0]; c = call(copies[k], k)[1][0]
    print(f"k{k}: dyn vs shared max|d| {(a-b).abs().max():.2e} argmax eq {(a.argmax(-1)==b.argmax(-1)).all().item()}; dyn vs copies {(a-c).abs().max():.2e}")
for name, get in (("dyn", lambda k: dyn), ("shared", lambda k: shared[k]), ("copies", lambda k: copies[k])):
    for k in (2, 4, 8, 16):
        f = get(k); [call(f, k) for _ in range(3)]
        ts = [call(f, k)[0] for _ in range(12)]
        print(f"{name:7s} k{k:<2d} steady median {st.median(ts):6.1f} ms  min {min(ts):6.1f}", flush=True)
    f1 = shared[1] if name != "copies" else copies[1]
    [call(f1, 1) for _ in range(3)]
    print(f"{name:7s} k1 (its k1) steady {st.median([call(f1,1)[0] for _ in range(12)]):6.1f}")
# mixed pattern: k1 from shared store, wide from dyn vs shared
for name, wide, one in (("dyn+sharedk1", dyn, shared[1]), ("shared", None, shared[1]), ("copies", None, copies[1])):
    res = {}
    for rep in range(5):
        for n in (1, 3):
            [call(one, 1) for _ in range(6)]
            ws = [call(wide or (shared if name == "shared" else copies)[8], 8)[0] for _ in range(n)]
            res.setdefault(f"k8 x{n}: k8 first", []).append(ws[0])
            res.setdefault(f"k8 x{n} -> k1 first", []).append(call(one, 1)[0])
    for key, v in res.items(): print(f"{name:13s} {key:22s} median {st.median(v):5.0f}  all {' '.join(f'{x:.0f}' for x in v)}", flush=True)

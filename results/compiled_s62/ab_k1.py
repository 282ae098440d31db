"""Two packages of the same model and width, called alternately in one process with the same inputs: ms per call
(medians of 15, 8 rounds). python ab_k1.py NAME=PATH NAME=PATH [...]"""
import statistics, sys, time
import torch
from fastforward.core import aot
from fastforward.core.memory import huge_pages, anon_huge_bytes
torch.set_num_threads(2)
pk = dict(a.split("=", 1) for a in sys.argv[1:])
import os
K = int(os.environ.get("K", 1)); CTX = 200; SIZE = 512; L, H, D = (int(v) for v in os.environ.get("LHD", "28,2,128").split(","))
ids = torch.randint(100, 1000, (1, K)); pos = torch.arange(CTX, CTX + K)[None]
mask = torch.full((1, 1, K, SIZE), float("-inf"))
for i in range(K): mask[0, 0, i, : CTX + i + 1] = 0
where = torch.arange(CTX, CTX + K)
kv = [torch.randn(1, H, SIZE, D) * 0.1 for _ in range(2 * L)]
runs = {n: aot.load(p) for n, p in pk.items()}
with torch.inference_mode():
    outs = {n: r(ids, pos, mask, where, *kv)[0] for n, r in runs.items()}
    names = list(outs); print("same logits:", all(torch.equal(outs[names[0]], outs[n]) for n in names))
    huge_pages(); print("huge", anon_huge_bytes())
    res = {n: [] for n in runs}
    for rnd in range(8):
        for n, r in runs.items():
            ts = []
            for _ in range(15):
                t = time.perf_counter(); r(ids, pos, mask, where, *kv); ts.append(time.perf_counter() - t)
            res[n].append(statistics.median(ts) * 1e3)
        print(rnd, {n: round(v[-1], 2) for n, v in res.items()}, flush=True)
print({n: (round(min(v), 2), round(statistics.median(v), 2), round(max(v), 2)) for n, v in res.items()})

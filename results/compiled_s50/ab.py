"""Interleaved A/B of two package stores (same fingerprint, different builds) in one process: k-token forwards."""
import os, sys, time, statistics as st, torch
torch.set_num_threads(2)
from pathlib import Path
from fastforward.core.compiled import inductor_cache
from fastforward.core.engine import ModelEngine, compile_forward, Block
from fastforward.models.cache import cache_root
from fastforward.models.loading import load_model
inductor_cache(str(cache_root()))
stores = sys.argv[1:]
DT = os.environ.get("DT", "bfloat16")
KS = [int(x) for x in os.environ.get("KS", "1,2,4,8").split(",")]
engs = []
for s in stores:
    lm = load_model("smollm2-135m", DT, path="default", threads=2)
    compile_forward(lm.model, 1024, mode="max-autotune", store=Path(s))
    e = ModelEngine(lm.model)
    engs.append(e)
ctx = int(os.environ.get("CTX", 200))
res = {(s, k): [] for s in stores for k in KS}
outs = {}
with torch.inference_mode():
    for e in engs:
        e.start(torch.arange(100, 100 + ctx)[None], capacity=ctx + 100)
        for k in KS:
            e.forward([Block.chain(list(range(200, 200 + k)))], 0); e.truncate(0, ctx)
        print("ran", e.ran, flush=True)
    for r in range(int(os.environ.get("ROUNDS", 6))):
        for k in KS:
            for s, e in zip(stores, engs):
                for _ in range(8):
                    t = time.perf_counter(); f = e.forward([Block.chain(list(range(200, 200 + k)))], 0)
                    res[(s, k)].append((time.perf_counter() - t) * 1e3); e.truncate(0, ctx)
                outs[(s, k)] = f.logits[0].float().clone()
for k in KS:
    line = f"k{k}:"
    for s in stores:
        line += f"  {Path(s).name} {st.median(res[(s, k)]):.2f} ms"
    d = (outs[(stores[0], k)] - outs[(stores[-1], k)]).abs().max().item()
    a = (outs[(stores[0], k)].argmax(-1) == outs[(stores[-1], k)].argmax(-1)).all().item()
    print(line, f" ratio {st.median(res[(stores[-1], k)]) / st.median(res[(stores[0], k)]):.3f}  max|dlogit| {d:.3g} same argmax {a}", flush=True)

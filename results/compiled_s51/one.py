"""One package build's step times, one process (session 50's one.py), and its logits saved for comparison.
Usage: python one.py STORE [LOGITS_OUT]; KS=1,8 CTX=128 env."""
import sys, os, time, statistics as st, torch
torch.set_num_threads(2)
from pathlib import Path
from fastforward.core.compiled import inductor_cache
from fastforward.core.engine import ModelEngine, compile_forward, Block
from fastforward.models.cache import cache_root
from fastforward.models.loading import load_model
inductor_cache(str(cache_root()))
lm = load_model("smollm2-135m", "bfloat16", path="default", threads=2)
compile_forward(lm.model, 1024, mode="max-autotune", store=Path(sys.argv[1]))
e = ModelEngine(lm.model)
ctx = int(os.environ.get("CTX", 128))
res, saved = {}, {}
with torch.inference_mode():
    e.start(torch.arange(100, 100 + ctx)[None], capacity=ctx + 100)
    for k in [int(x) for x in os.environ.get("KS", "1").split(",")]:
        ts = []
        for i in range(int(os.environ.get("N", 80))):
            t = time.perf_counter(); f = e.forward([Block.chain(list(range(200, 200 + k)))], 0); ts.append((time.perf_counter() - t) * 1e3); e.truncate(0, ctx)
            if i == 0:
                saved[k] = f._all.float().clone()
        res[k] = round(st.median(ts[10:]), 2)
print(Path(sys.argv[1]).name, os.environ.get("FF_KV32", "-"), res, flush=True)
if len(sys.argv) > 2:
    torch.save(saved, sys.argv[2])

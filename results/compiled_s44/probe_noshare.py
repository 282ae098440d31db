import json, os, sys, time
import torch
import fastforward.core.compiled as C
from fastforward.core.compiled import inductor_cache
from fastforward.core.engine import Block, ModelEngine, compile_forward
from fastforward.models.cache import cache_root, compiled_dir
from fastforward.models.loading import load_model
from pathlib import Path
SHARE = os.environ.get("SHARE", "0") == "1"
if not SHARE:
    C.shares_weights = lambda m: False
inductor_cache(str(cache_root()))
lm = load_model("smollm2-135m", "float32", path="default", threads=2)
store = compiled_dir() if SHARE else Path("/tmp/s44/store_noshare")
t0 = time.time()
compile_forward(lm.model, store=store, widths=(1, 8))
engine = ModelEngine(lm.model)
prompt = torch.arange(100, 300)[None]
with torch.inference_mode():
    engine.start(prompt, capacity=300)
    for k in (1, 8):
        engine.forward([Block.chain([7] * k)]); engine.truncate(0, 200)
    print("build+warm s", round(time.time() - t0, 1), flush=True)
    for rnd in range(3):
        ours = {}
        for k in (1, 8):
            ts = []
            for _ in range(15):
                t1 = time.perf_counter(); engine.forward([Block.chain([7] * k)]); ts.append((time.perf_counter() - t1) * 1e3)
                engine.truncate(0, 200)
            ours[k] = sorted(ts)[7]
        print(json.dumps({"share": SHARE, "k1": round(ours[1], 2), "k8": round(ours[8], 2), "k8_k1": round(ours[8] / ours[1], 2)}), flush=True)
    engine.close()

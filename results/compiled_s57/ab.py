import sys, time, torch, json, os
import torch._inductor.config as ic
for kv in filter(None, os.environ.get("CFG", "").split(",")):
    k, v = kv.split("=")
    obj = ic
    *path, last = k.split(".")
    for p in path: obj = getattr(obj, p)
    setattr(obj, last, (v == "1") if v in ("0", "1") else v)
    print("set", k, getattr(obj, last), file=sys.stderr)
from pathlib import Path
from fastforward.core.compiled import inductor_cache
from fastforward.core.engine import ModelEngine, compile_forward, Block
from fastforward.models.cache import cache_root, compiled_dir
from fastforward.models.loading import load_model
from fastforward.bench.engine_table import forward_ms
store = compiled_dir() if sys.argv[1] == "prod" else Path(sys.argv[1])
reps = int(sys.argv[2]) if len(sys.argv) > 2 else 15
inductor_cache(str(cache_root()))
lm = load_model("smollm2-135m", "float32", path="default", threads=2)
compile_forward(lm.model, store=store, widths=None if "all" in sys.argv else [1, 8])
engine = ModelEngine(lm.model)
ctx = 200
with torch.inference_mode():
    engine.start(torch.arange(100, 100 + ctx)[None], capacity=ctx + 100)
    for k in (1, 8): forward_ms(engine, k, 3, ctx)
    r = {k: forward_ms(engine, k, reps, ctx) for k in (1, 8)}
    print(json.dumps({"store": sys.argv[1], "cfg": os.environ.get("CFG", ""), "all": "all" in sys.argv, "k1": round(r[1], 2), "k8": round(r[8], 2), "k8_k1": round(r[8] / r[1], 2)}), flush=True)

import os, sys, time, statistics as st, torch
torch.set_num_threads(2)
from fastforward.core.compiled import inductor_cache
from fastforward.core.engine import ModelEngine, compile_forward, Block
from fastforward.models.cache import cache_root, compiled_dir
from fastforward.models.loading import load_model
from torch.profiler import profile, ProfilerActivity
inductor_cache(str(cache_root()))
lm = load_model("smollm2-135m", "bfloat16", path="default", threads=2)
compile_forward(lm.model, 1024, mode="max-autotune", store=__import__("pathlib").Path(os.environ["STORE"]) if os.environ.get("STORE") else compiled_dir())
eng = ModelEngine(lm.model)
ctx = 128
KS = [int(k) for k in os.environ.get("KS", "1,4,8").split(",")]
with torch.inference_mode():
    eng.start(torch.arange(100, 100 + ctx)[None], capacity=ctx + 100)
    for k in KS:
        for _ in range(3):
            eng.forward([Block.chain(list(range(200, 200 + k)))], 0); eng.truncate(0, ctx)
    for k in KS:
        with profile(activities=[ProfilerActivity.CPU]) as p:
            for _ in range(10):
                eng.forward([Block.chain(list(range(200, 200 + k)))], 0); eng.truncate(0, ctx)
        print(f"=== k{k}")
        print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))

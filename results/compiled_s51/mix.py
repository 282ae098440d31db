"""Issue 32, session 51: each bucket's step cost when widths mix as in a suffix run (k1 23%, k4 62%, k8 7%,
k16 7%, drawn at random) against the same buckets run alone, in alternating spells (bf16 SmolLM2, stored
packages, 512-slot cache after 150 cached tokens). HUGE=1: move the process onto 2 MB pages first."""
import os, random, time, statistics as st, torch
torch.set_num_threads(2)
from pathlib import Path
from fastforward.core.compiled import inductor_cache
from fastforward.core.engine import ModelEngine, compile_forward, Block
from fastforward.core.memory import huge_pages
from fastforward.models.cache import cache_root
from fastforward.models.loading import load_model
inductor_cache(str(cache_root()))
lm = load_model("smollm2-135m", "bfloat16", path="default", threads=2)
compile_forward(lm.model, 1024, mode="max-autotune", store=Path.home() / ".cache/fastforward/compiled")
e = ModelEngine(lm.model)
ctx = 150
def step(k):
    t = time.perf_counter(); f = e.forward([Block.chain(list(range(200, 200 + k)))], 0); f.argmax; dt = time.perf_counter() - t; e.truncate(0, ctx); return dt * 1e3
rng = random.Random(0)
with torch.inference_mode():
    e.start(torch.arange(100, 100 + ctx)[None], capacity=ctx + 200)
    for k in (1, 4, 8, 16):
        for _ in range(5): step(k)
    if os.environ.get("HUGE"): print("huge bytes", huge_pages())
    alone = {k: [] for k in (1, 4, 8, 16)}; mixed = {k: [] for k in (1, 4, 8, 16)}
    for r in range(int(os.environ.get("ROUNDS", 6))):
        for k in (1, 4, 8, 16):
            for j in range(10):
                dt = step(k)
                if j >= 2: alone[k].append(dt)
        for j in range(60):
            k = rng.choices((1, 4, 8, 16), (23, 62, 7, 7))[0]
            mixed[k].append(step(k))
    print("alone", {k: round(st.median(v), 2) for k, v in alone.items()})
    print("mixed", {k: (round(st.median(v), 2), len(v)) for k, v in mixed.items()})

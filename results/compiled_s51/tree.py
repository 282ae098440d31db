"""Issue 32, session 51: a tree block's step against a chain's of the same bucket (bf16 SmolLM2, stored
packages, 512-slot cache after CTX cached tokens); ModelEngine.forward timed whole, in rounds."""
import os, time, statistics as st, torch
torch.set_num_threads(2)
from pathlib import Path
from fastforward.core.compiled import inductor_cache
from fastforward.core.engine import ModelEngine, compile_forward, Block
from fastforward.models.cache import cache_root
from fastforward.models.loading import load_model
inductor_cache(str(cache_root()))
lm = load_model("smollm2-135m", "bfloat16", path="default", threads=2)
compile_forward(lm.model, 1024, mode="max-autotune", store=Path.home() / ".cache/fastforward/compiled")
e = ModelEngine(lm.model)
ctx = 150
def step(blk):
    t = time.perf_counter(); f = e.forward([blk], 0); f.argmax; dt = time.perf_counter() - t; e.truncate(0, ctx); return dt * 1e3
cases = {
    "chain1": Block.chain([200]),
    "chain3": Block.chain([200, 201, 202]),
    "chain4": Block.chain([200, 201, 202, 203]),
    "tree3": Block([200, 201, 202], [-1, 0, 0]),
    "tree4": Block([200, 201, 202, 203], [-1, 0, 1, 0]),
    "chain8": Block.chain(list(range(200, 208))),
    "tree7": Block(list(range(200, 207)), [-1, 0, 1, 2, 0, 4, 0]),
}
with torch.inference_mode():
    e.start(torch.arange(100, 100 + ctx)[None], capacity=ctx + 200)
    for b in cases.values():
        for _ in range(5): step(b)
    ts = {n: [] for n in cases}
    for r in range(6):
        for n, b in cases.items():
            for j in range(12):
                dt = step(b)
                if j >= 2: ts[n].append(dt)
    print({n: round(st.median(v), 2) for n, v in ts.items()})

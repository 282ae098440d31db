"""Issue 32, session 51: does a width's step cost more when steps of other widths run between them?
bf16 SmolLM2, stored packages, 512-slot cache after CTX cached tokens; medians over N steps."""
import os, time, statistics as st, torch
torch.set_num_threads(2)
from pathlib import Path
from fastforward.core.compiled import inductor_cache
from fastforward.core.engine import ModelEngine, compile_forward, Block
from fastforward.core.memory import huge_pages
from fastforward.models.cache import cache_root, compiled_dir
from fastforward.models.loading import load_model
inductor_cache(str(cache_root()))
lm = load_model("smollm2-135m", "bfloat16", path="default", threads=2)
compile_forward(lm.model, 1024, mode="max-autotune", store=Path(os.environ.get("STORE", str(Path.home() / ".cache/fastforward/compiled"))))
e = ModelEngine(lm.model)
ctx = int(os.environ.get("CTX", 150)); N = int(os.environ.get("N", 60))
def step(k):
    t = time.perf_counter(); e.forward([Block.chain(list(range(200, 200 + k)))], 0); dt = time.perf_counter() - t; e.truncate(0, ctx); return dt * 1e3
with torch.inference_mode():
    e.start(torch.arange(100, 100 + ctx)[None], capacity=ctx + 200)
    for k in (1, 2, 4, 8, 16):
        for _ in range(5): step(k)
    if os.environ.get("HUGE"): print("huge", huge_pages())
    patterns = [p.split("-") for p in os.environ.get("PATTERNS", "1 4 8 16 1-4 8-16 1-8 4-16 1-4-8-16").split()]
    ts = {i: {k: [] for k in set(p)} for i, p in enumerate(patterns)}
    for r in range(int(os.environ.get("ROUNDS", 4))):  # patterns in turns, so a slow spell of the host hits all
        for i, pattern in enumerate(patterns):
            for j in range(N // 4):
                for k in pattern:
                    dt = step(int(k))
                    if j >= 2:
                        ts[i][k].append(dt)
    for i, pattern in enumerate(patterns):
        print("pattern", "-".join(pattern), {k: round(st.median(v), 2) for k, v in sorted(ts[i].items(), key=lambda x: int(x[0]))}, flush=True)

"""Where a compiled W8A8 step's time goes, by torch.profiler around the engine's forward: the AOTInductor
package's own call against everything around it (masks, positions, cache bookkeeping, logits), for 1- and
k-token chains after a 200-token prompt. PYTHONPATH=src python step_profile.py MODEL [k]"""

from __future__ import annotations

import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

from fastforward.core.engine import Block, ModelEngine, compile_forward
from fastforward.models.cache import compiled_dir
from fastforward.models.loading import load_model

ref = sys.argv[1]
k = int(sys.argv[2]) if len(sys.argv) > 2 else 8
lm = load_model(ref, "float32", path="default", threads=2, weights="w8a8")
compile_forward(lm.model, store=compiled_dir())
engine = ModelEngine(lm.model)
prompt = torch.arange(100, 300)[None]
with torch.inference_mode():
    engine.start(prompt, capacity=prompt.shape[1] + 64)
    n0 = prompt.shape[1]

    def step(w: int) -> None:
        engine.forward([Block.chain(list(range(400, 400 + w)))])
        engine.truncate(0, n0)

    for w in (1, k):
        for _ in range(3):
            step(w)
        times = []
        for _ in range(10):
            t = time.perf_counter()
            step(w)
            times.append((time.perf_counter() - t) * 1e3)
        print(f"{ref} k={w}: median {sorted(times)[5]:.1f} ms", flush=True)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(10):
                step(w)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=14), flush=True)

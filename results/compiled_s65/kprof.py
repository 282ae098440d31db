"""Where SmolLM2's fp32 1- and 8-token steps spend their time, kernel by kernel, with inductor's default GEMM
cache blocking and with K whole (KC=default|full, as kc.py): packages built with cpp.enable_kernel_profile
into a scratch store (session 55's kernel_profile.py, whose caveat holds: such a build adds gaps between
kernels, so read the kernels' own times, not the step medians).

    KC=full PYTHONPATH=src python results/compiled_s65/kprof.py
"""
import os
import time
from pathlib import Path

import torch
import torch._inductor.config as ic
from torch.profiler import ProfilerActivity, profile

from fastforward.core.compiled import inductor_cache
from fastforward.core.engine import Block, ModelEngine, compile_forward
from fastforward.models.loading import load_model

ic.cpp.enable_kernel_profile = True
KC = os.environ.get("KC", "default")
if KC == "full":
    ic.cpp.gemm_cache_blocking = "1000000,1,1000000"
root = Path(os.environ.get("ROOT", "/tmp/s65"))
inductor_cache(str(root / f"indprof_{KC}"))
store = root / f"kstore_{KC}"
lm = load_model("smollm2-135m", "float32", path="default", threads=2)
compile_forward(lm.model, store=store, widths=(1, 8))
engine = ModelEngine(lm.model)
prompt = torch.arange(100, 300)[None]
with torch.inference_mode():
    engine.start(prompt, capacity=prompt.shape[1] + 64)
    n0 = prompt.shape[1]

    def step(w: int) -> None:
        engine.forward([Block.chain(list(range(400, 400 + w)))])
        engine.truncate(0, n0)

    for w in (1, 8):
        for _ in range(3):
            step(w)
        times = []
        for _ in range(10):
            t = time.perf_counter()
            step(w)
            times.append((time.perf_counter() - t) * 1e3)
        print(f"KC={KC} k={w}: median {sorted(times)[5]:.1f} ms", flush=True)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(10):
                step(w)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25, max_name_column_width=70), flush=True)

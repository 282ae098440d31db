"""Where a compiled W8A8 step's time goes, kernel by kernel: packages built with inductor's
cpp.enable_kernel_profile (each generated kernel records itself for torch.profiler) into a scratch STORE (the
flag is not part of a package's fingerprint, so never the real store), then 1- and k-token chains after a
200-token prompt under torch.profiler; a chrome trace per width lands beside the packages.

    PYTHONPATH=src python results/compiled_s55/kernel_profile.py qwen2.5-coder-1.5b 1,8 /tmp/kstore [w8a8|full]
"""
import sys, time
from pathlib import Path
import torch
import torch._inductor.config as ic
ic.cpp.enable_kernel_profile = True
from torch.profiler import ProfilerActivity, profile
from fastforward.core.engine import Block, ModelEngine, compile_forward
from fastforward.models.loading import load_model

ref = sys.argv[1]; ws = [int(x) for x in sys.argv[2].split(",")]; store = Path(sys.argv[3])
weights = sys.argv[4] if len(sys.argv) > 4 else "w8a8"
lm = load_model(ref, "float32", path="default", threads=2, weights=weights)
compile_forward(lm.model, store=store, widths=ws)
engine = ModelEngine(lm.model)
prompt = torch.arange(100, 300)[None]
with torch.inference_mode():
    engine.start(prompt, capacity=prompt.shape[1] + 64)
    n0 = prompt.shape[1]
    def step(w):
        engine.forward([Block.chain(list(range(400, 400 + w)))])
        engine.truncate(0, n0)
    for w in ws:
        for _ in range(3): step(w)
        times = []
        for _ in range(10):
            t = time.perf_counter(); step(w); times.append((time.perf_counter() - t) * 1e3)
        print(f"{ref} k={w}: median {sorted(times)[5]:.1f} ms", flush=True)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(10): step(w)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=40, max_name_column_width=60), flush=True)
        prof.export_chrome_trace(str(store / f"trace_{ref}_k{w}.json"))

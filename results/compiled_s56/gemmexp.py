"""Build (phase=build) or time (phase=time) SmolLM2 fp32 packages with the GEMM backends forced to GEMM.
    py gemmexp.py build|time GEMM STORE WIDTHS [model] [weights]"""
import sys, time, json
from pathlib import Path
import torch
from fastforward.core import compiled as C
from fastforward.core.engine import Block, ModelEngine, compile_forward
from fastforward.models.loading import load_model
phase, gemm, store, ws = sys.argv[1], sys.argv[2], Path(sys.argv[3]), [int(x) for x in sys.argv[4].split(",")]
ref = sys.argv[5] if len(sys.argv) > 5 else "smollm2-135m"
weights = sys.argv[6] if len(sys.argv) > 6 else "full"
if gemm != "default":
    C.CompiledForward.gemm_for = lambda self, width: gemm
lm = load_model(ref, "float32", path="default", threads=2, weights=weights)
runner = compile_forward(lm.model, store=store, widths=ws)
engine = ModelEngine(lm.model)
prompt = torch.arange(100, 300)[None]
res = {}
with torch.inference_mode():
    engine.start(prompt, capacity=prompt.shape[1] + 64)
    n0 = prompt.shape[1]
    def step(w):
        engine.forward([Block.chain(list(range(400, 400 + w)))])
        engine.truncate(0, n0)
    for w in ws:
        t0 = time.perf_counter(); step(w); first = time.perf_counter() - t0
        if phase == "build":
            print(f"{gemm} k={w}: first call {first:.1f} s", flush=True); continue
        for _ in range(3): step(w)
        times = []
        for _ in range(15):
            t = time.perf_counter(); step(w); times.append((time.perf_counter() - t) * 1e3)
        res[w] = sorted(times)[7]
    if phase == "time":
        print(gemm, json.dumps({w: round(v, 2) for w, v in res.items()}), flush=True)

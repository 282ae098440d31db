"""k8/k1 of SmolLM2 fp32 packages built with inductor's GEMM-template blocking overridden (session 58 probe).
TAG names the store; CB = cpp.gemm_cache_blocking "Mc,Nc,Kc" (register blocks), TF = cpp.gemm_thread_factors.
MODE=build: build/load the 1- and 8-token packages; MODE=time: ROUNDS rounds of median-of-9 k1 and k8."""
import os, sys, json, torch
import torch._inductor.config as ic
from fastforward.bench.engine_table import forward_ms
from fastforward.core.compiled import inductor_cache
from fastforward.core.engine import ModelEngine, compile_forward
from fastforward.models.cache import cache_root, compiled_dir
from fastforward.models.loading import load_model
tag = os.environ.get("TAG", "default")
if tag == "default":
    inductor_cache(str(cache_root())); store = compiled_dir()
else:
    inductor_cache(f"/tmp/s58/ind_{tag}"); store = f"/tmp/s58/store_{tag}"
lm = load_model("smollm2-135m", "float32", path="default", threads=2)
compile_forward(lm.model, store=store)
if os.environ.get("CB"): ic.cpp.gemm_cache_blocking = os.environ["CB"]
if os.environ.get("TF"): ic.cpp.gemm_thread_factors = os.environ["TF"]
engine = ModelEngine(lm.model)
ctx = 200
with torch.inference_mode():
    engine.start(torch.arange(100, 100 + ctx)[None], capacity=ctx + 100)
    for k in (1, 8):
        forward_ms(engine, k, 1, ctx)
    if os.environ.get("MODE", "time") == "time":
        for r in range(int(os.environ.get("ROUNDS", "4"))):
            ms = {k: forward_ms(engine, k, 9, ctx) for k in (1, 8)}
            print(json.dumps({"tag": tag, "round": r, "k1": round(ms[1], 2), "k8": round(ms[8], 2), "k8_k1": round(ms[8] / ms[1], 3)}), flush=True)
    engine.close()

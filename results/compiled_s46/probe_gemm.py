"""Probe (session 36; session 38 for int8 weights; copied in session 46, code unchanged): compiled per-width step cost under a forced inductor GEMM backend set.
usage: [MODEL=smollm2-135m WEIGHTS=full KS=1,2,4,8,16] probe_gemm.py DTYPE GEMM STORE"""
import os, sys, time, statistics as st, json
from pathlib import Path
import torch
torch.set_num_threads(2)
dtype, gemm, store = sys.argv[1], sys.argv[2], Path(sys.argv[3])
import fastforward.core.compiled as C
C.gemm_backends = lambda *a, **k: gemm
from fastforward.models.loading import load_model
from fastforward.core.engine import compile_forward, ModelEngine
from fastforward.core.engine import Block
lm = load_model(os.environ.get("MODEL", "smollm2-135m"), dtype, weights=os.environ.get("WEIGHTS", "full"))
model = lm.model
compile_forward(model, mode="max-autotune", store=store)
gen = torch.Generator().manual_seed(0)
ctx = 128
prefix = torch.randint(0, 49000, (1, ctx), generator=gen)
KS = tuple(int(k) for k in os.environ.get("KS", "1,2,4,8,16").split(","))
blocks = {k: Block.chain(torch.randint(0, 49000, (k,), generator=gen).tolist()) for k in KS}
eng = ModelEngine(model)
eng.start(prefix, capacity=ctx + 1, room=32)
t0 = time.time()
for k in KS:  # build / load every bucket first
    eng.forward([blocks[k]]); eng.truncate(0, ctx)
print("built/loaded in", round(time.time() - t0, 1), "s", "ran", eng.ran, flush=True)
res = {}
for k in KS:
    for _ in range(3):
        eng.forward([blocks[k]]); eng.truncate(0, ctx)
    ts = []
    for _ in range(15):
        t = time.perf_counter(); eng.forward([blocks[k]]); ts.append((time.perf_counter() - t) * 1e3); eng.truncate(0, ctx)
    res[k] = st.median(ts)
    print(f"{os.environ.get('MODEL', 'smollm2-135m')} {os.environ.get('WEIGHTS', 'full')} {dtype} {gemm} k{k}: median {res[k]:.1f} ms min {min(ts):.1f}", flush=True)
print(json.dumps({"model": os.environ.get("MODEL", "smollm2-135m"), "weights": os.environ.get("WEIGHTS", "full"),
                  "dtype": dtype, "gemm": gemm, "ms": res, "k8_over_k1": res.get(8, 0) / res[1]}))

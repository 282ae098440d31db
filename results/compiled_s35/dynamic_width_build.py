"""Probe: one AOTInductor package with a dynamic width k (2..32), templates + prepacked weights, vs static."""
import sys, time, torch, statistics as st
from pathlib import Path
torch.set_num_threads(2)
from fastforward.models.loading import load_model
from fastforward.core.engine import compile_forward, model_call
from fastforward.core import aot
import torch._inductor.config as ic
lm = load_model("smollm2-135m", "float32")
model = lm.model if hasattr(lm, "model") else lm[0]
runner = compile_forward(model, mode="max-autotune", store=None)
ic.cpp.weight_prepack = True
cache = runner.cache
print("cache", cache.capacity, flush=True)
def inputs(k):
    g = torch.Generator().manual_seed(k)
    ids = torch.randint(0, 49000, (1, k), generator=g); pos = torch.arange(100, 100+k)[None]
    mask = torch.zeros(1, 1, k, cache.capacity, dtype=torch.bool); mask[..., :100+k] = True
    return ids, pos, mask, torch.arange(100, 100+k)
kv = [torch.zeros(1, 3, cache.capacity, 64) for _ in range(60)]
print("kv", len(kv), kv[0].shape, flush=True)
out = Path("/tmp/dyn/kdyn.pt2")
if not out.exists():
    step = aot.Step(model, model_call, cache.capacity, False).eval()
    k = torch.export.Dim.DYNAMIC(min=2, max=32)
    args = (*inputs(8), *[t.clone() for t in kv])
    ds = ({1: k}, {1: k}, {2: k}, {0: k}, tuple([None]*len(kv)))
    t0 = time.time()
    with torch.no_grad():
        prog = torch.export.export(step, args, dynamic_shapes=ds, strict=False)
    print("exported", time.time()-t0, flush=True)
    torch._inductor.aoti_compile_and_package(prog, package_path=str(out), inductor_configs={
        "freezing": True, "max_autotune": True, "max_autotune_gemm_backends": "ATEN,TRITON,CPP",
        "cpp.weight_prepack": True})
    print("built", time.time()-t0, flush=True)

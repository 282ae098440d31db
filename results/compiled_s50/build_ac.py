import os, sys, torch
torch.set_num_threads(2)
from pathlib import Path
import fastforward.core.compiled as C
real = C.gemm_backends
C.gemm_backends = lambda dtype, amx=None, int4=False, width=None: os.environ["GEMM"] if (width or 0) >= 8 else real(dtype, amx, int4, width)
from fastforward.core.compiled import inductor_cache
from fastforward.core.engine import ModelEngine, compile_forward, Block
from fastforward.models.cache import cache_root
from fastforward.models.loading import load_model
inductor_cache(str(cache_root()))
lm = load_model("smollm2-135m", "bfloat16", path="default", threads=2)
compile_forward(lm.model, 1024, mode="max-autotune", store=Path(sys.argv[1]))
eng = ModelEngine(lm.model)
with torch.inference_mode():
    eng.start(torch.arange(100, 228)[None], capacity=228)
    for k in [int(x) for x in os.environ.get("KS", "8").split(",")]:
        eng.forward([Block.chain(list(range(200, 200 + k)))], 0); eng.truncate(0, 128)
print("ran", eng.ran)

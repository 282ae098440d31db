"""Probe (session 65): with the g++ front, do inductor's float32 GEMM templates beat oneDNN's linear for SmolLM2's
16- and 32-token steps, where gemm_backends sends them to oneDNN after session 56's timings (taken while the
templates' kernels stored their accumulators at every step of K)? VARIANT=aten: the store's packages as the
code builds them (oneDNN from 16); VARIANT=cpp: the templates at every width (FP32_TEMPLATE_WIDTH raised in
this process only), built into a store of their own. MODE=build only builds; MODE=time: ROUNDS rounds of
median-of-9 16- and 32-token steps after 200 cached tokens."""
import json
import os
from pathlib import Path

import torch

from fastforward.bench.engine_table import forward_ms
from fastforward.core import compiled as cmod
from fastforward.core.compiled import inductor_cache
from fastforward.core.engine import ModelEngine, compile_forward
from fastforward.core.memory import huge_pages
from fastforward.models.cache import cache_root, compiled_dir
from fastforward.models.loading import load_model

VARIANT = os.environ.get("VARIANT", "aten")
WIDTHS = (16, 32)
if VARIANT == "cpp":
    cmod.FP32_TEMPLATE_WIDTH = 32
    inductor_cache("/tmp/s65/wide_cpp")
    store = Path("/tmp/s65/wide_cpp/store")
else:
    inductor_cache(str(cache_root()))
    store = compiled_dir()
lm = load_model("smollm2-135m", "float32", path="default", threads=2)
compile_forward(lm.model, store=store, widths=(1, *WIDTHS))
engine = ModelEngine(lm.model)
with torch.inference_mode():
    engine.start(torch.arange(100, 300)[None], capacity=300)
    for k in WIDTHS:
        forward_ms(engine, k, 1, 200)
    huge_pages()
    if os.environ.get("MODE", "time") == "time":
        for r in range(int(os.environ.get("ROUNDS", "3"))):
            ms = {k: round(forward_ms(engine, k, 9, 200), 2) for k in WIDTHS}
            print(json.dumps({"variant": VARIANT, "round": r, **{f"k{k}": v for k, v in ms.items()}}), flush=True)
    engine.close()

"""One compiled package set against another, each built into a store of its own and timed in alternating
processes (session 59). The 1.5B's bf16 8-token step with inductor's concat-linear freezing pass (``CONCAT=1``,
``cpp.enable_concat_linear``: q/k/v, and gate/up, each one GEMM over their shared input), and SmolLM2's float32
8-token step on oneDNN's linear instead of the GEMM templates (``TEMPLATE_WIDTH=4``: float32 widths above 4 on
ATen).

MODE=build: build the ``WIDTHS`` packages of ``MODEL``/``DTYPE`` into the store ``STORE`` (nothing timed).
MODE=time: load the packages of ``STORE`` (default: the usual store) and print the ``WIDTHS`` steps after 200
cached tokens, medians of 9, as one JSON line (``engine_table.forward_ms``, the interleave's timer).
Run one process per store, alternated, so both see the same host."""

import json
import os
from pathlib import Path

import torch

from fastforward.bench.engine_table import forward_ms
from fastforward.core.compiled import inductor_cache
from fastforward.core.engine import ModelEngine, compile_forward, warm_buckets
from fastforward.models.cache import cache_root, compiled_dir
from fastforward.models.loading import load_model

MODEL, DTYPE = os.environ.get("MODEL", "qwen2.5-coder-1.5b"), os.environ.get("DTYPE", "bfloat16")
STORE = Path(os.environ["STORE"]) if os.environ.get("STORE") else compiled_dir()
WIDTHS = tuple(int(w) for w in os.environ.get("WIDTHS", "1,8").split(","))
if os.environ.get("TEMPLATE_WIDTH"):  # float32 widths above it on ATen (oneDNN) instead of the templates
    import fastforward.core.compiled as compiled_module

    compiled_module.FP32_TEMPLATE_WIDTH = int(os.environ["TEMPLATE_WIDTH"])
if os.environ.get("CONCAT") == "1":
    torch._inductor.config.cpp.enable_concat_linear = True
inductor_cache(str(cache_root()))
lm = load_model(MODEL, DTYPE, path="default", threads=2)
compile_forward(lm.model, store=STORE)
with torch.inference_mode():
    if os.environ.get("MODE", "time") == "build":
        for w in WIDTHS:
            print(f"width {w}: {warm_buckets(lm.model, (w,)):.1f} s", flush=True)
    else:
        engine = ModelEngine(lm.model)
        engine.start(torch.arange(100, 300)[None], capacity=300)
        for k in WIDTHS:
            forward_ms(engine, k, 1, 200)
        ms = {k: round(forward_ms(engine, k, 9, 200), 2) for k in WIDTHS}
        ratio = round(ms[8] / ms[1], 3) if {1, 8} <= set(ms) else None
        print(json.dumps({"store": STORE.name, "ms": ms, "k8_k1": ratio}), flush=True)
        engine.close()

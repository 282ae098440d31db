"""SmolLM2 fp32 compiled 1- and 8-token steps with the buckets' weights shared (SHARE=1: one plain copy, ATen's
MKL matmuls; the library's choice for float32 before session 44) or not (SHARE=0: a copy per bucket,
inductor's GEMM templates over prepacked weights), 200 cached tokens, medians of 15, three rounds. A probe of
a configuration the library may not choose on this CPU, so it overrides that choice here, in the probe only.
   SHARE=0 PYTHONPATH=src .venv/bin/python results/compiled_s44/probe_noshare.py"""
import json, os, tempfile, time
from pathlib import Path
import torch
import fastforward.core.compiled as C
from fastforward.bench.engine_table import forward_ms
from fastforward.core.engine import ModelEngine, compile_forward
from fastforward.models.cache import cache_root
from fastforward.models.loading import load_model

SHARE = os.environ.get("SHARE", "0") == "1"
C.shares_weights = lambda m: SHARE
C.inductor_cache(str(cache_root()))
lm = load_model("smollm2-135m", "float32", path="default", threads=2)
t0 = time.time()
compile_forward(lm.model, store=Path(tempfile.gettempdir()) / f"ff_probe_share{int(SHARE)}", widths=(1, 8))
engine = ModelEngine(lm.model)
with torch.inference_mode():
    engine.start(torch.arange(100, 300)[None], capacity=300)
    for k in (1, 8):
        forward_ms(engine, k, 1, 200)
    print("build+warm s", round(time.time() - t0, 1), flush=True)
    for _ in range(3):
        ms = {k: forward_ms(engine, k, 15, 200) for k in (1, 8)}
        print(json.dumps({"share": SHARE, "k1": round(ms[1], 2), "k8": round(ms[8], 2), "k8_k1": round(ms[8] / ms[1], 2)}), flush=True)
    engine.close()

"""SmolLM2-135M float32's compiled 1- and 8-token steps in one process, five cycles, the 8-token package dropped
and loaded again between cycles (session 60, k8_spread.txt): does a reload change the 8-token step's cost?
Run from the repository root, nothing else running: PYTHONPATH=src python results/compiled_s60/reload.py"""

import gc
import json

import torch

from fastforward.bench.engine_table import forward_ms
from fastforward.core import memory
from fastforward.core.compiled import compiled, inductor_cache
from fastforward.core.engine import ModelEngine, compile_forward
from fastforward.models.cache import cache_root, compiled_dir
from fastforward.models.loading import load_model

inductor_cache(str(cache_root()))
lm = load_model("smollm2-135m", "float32", path="default", threads=2)
compile_forward(lm.model, store=compiled_dir())
runner = compiled(lm.model)
assert runner is not None
with torch.inference_mode():
    engine = ModelEngine(lm.model)
    engine.start(torch.arange(100, 300)[None], capacity=300)
    for k in (1, 8):
        forward_ms(engine, k, 1, 200)
    for cycle in range(5):
        ms = {k: round(forward_ms(engine, k, 15, 200), 2) for k in (1, 8)}
        print(json.dumps({"cycle": cycle, **ms}), flush=True)
        for key in [key for key in runner._packages if key[0] == 8]:
            del runner._packages[key]
        gc.collect()
        memory.return_freed_memory()
        forward_ms(engine, 8, 1, 200)  # loads the 8-token package again
    engine.close()

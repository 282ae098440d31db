"""Cached-start experiment (issue 32): SmolLM2-135M fp32, eager vs compiled 1- and 8-token forwards over a
512-slot fixed cache, with or without inductor's weight freezing and weight prepacking; the first forward of
each bucket (its compile) is timed. Run twice with the same TORCHINDUCTOR_CACHE_DIR: the second run shows
what inductor's on-disk FX graph cache gives back (its hit/miss/bypass counters are printed).

    TORCHINDUCTOR_CACHE_DIR=/tmp/ind python results/compile_startup/startup.py --freeze 1 --prepack 1
"""

import argparse
import json
import time

import torch
import torch._inductor.config as inductor_config
from torch._dynamo.utils import counters

from fastforward.core.engine import Block, ModelEngine, compile_forward
from fastforward.models.loading import load_model

p = argparse.ArgumentParser()
p.add_argument("--freeze", type=int, default=1)
p.add_argument("--prepack", type=int, default=1)
p.add_argument("--buckets", default="1,8")
args = p.parse_args()
buckets = [int(b) for b in args.buckets.split(",")]
lm = load_model("smollm2-135m", threads=2)
prompt = list(range(100, 300))
out: dict = {"freezing": bool(args.freeze), "weight_prepack": bool(args.prepack)}


def median_ms(engine: ModelEngine, k: int, n: int = 12) -> float:
    ms = []
    for _ in range(n):
        t = time.perf_counter()
        engine.forward([Block.chain([5] * k)])
        ms.append((time.perf_counter() - t) * 1e3)
        engine.truncate(0, len(prompt))
    return round(sorted(ms)[n // 2], 1)


with torch.inference_mode():
    eager = ModelEngine(lm.model)
    eager.start(torch.tensor([prompt]), capacity=300)
    out.update({f"eager_ms_{k}": median_ms(eager, k) for k in buckets})
    eager.reset()
    runner = compile_forward(lm.model, capacity=512)  # before any compiled forward exists
    inductor_config.freezing = bool(args.freeze)
    inductor_config.cpp.weight_prepack = bool(args.prepack)
    engine = ModelEngine(lm.model)
    engine.start(torch.tensor([prompt]), capacity=300)
    for k in buckets:
        t = time.perf_counter()
        engine.forward([Block.chain([5] * k)])
        out[f"compile_{k}_s"] = round(time.perf_counter() - t, 1)
        engine.truncate(0, len(prompt))
        out[f"compiled_ms_{k}"] = median_ms(engine, k)
    out["ran"], out["failed"] = engine.ran, runner.failed
out["fxgraph_cache"] = {k: v for k, v in counters["inductor"].items() if "fxgraph" in k}
print(json.dumps(out))

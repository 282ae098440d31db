"""Probe (session 64, issue 32): does a software prefetch in inductor's fp32 GEMM micro-kernel let SmolLM2's
8-token step overlap its weight stream with its arithmetic? PF = prefetch distance in rows of the packed weight
(0: inductor's kernel as shipped). Each PF builds its 1- and 8-token packages into its own store and inductor
cache. MODE=build only builds; MODE=time: ROUNDS rounds of median-of-9 k1 and k8 after 200 cached tokens.
The patch swaps inductor's fp32 micro-kernel class for a subclass whose template adds one _mm_prefetch per
weight vector load; the arithmetic (and so every bit) is unchanged."""
import json
import os
from pathlib import Path

import torch
import torch._inductor.compile_fx  # noqa: F401  (imports the codegen modules in their working order)
from torch._inductor.codegen import cpp_micro_gemm as cmg

from fastforward.bench.engine_table import forward_ms
from fastforward.core.compiled import inductor_cache
from fastforward.core.engine import ModelEngine, compile_forward
from fastforward.core.memory import anon_huge_bytes, huge_pages
from fastforward.models.loading import load_model

PF = int(os.environ.get("PF", "0"))
HINT = os.environ.get("HINT", "T0")  # T0: into L1, T1: into L2
LOAD = "            vb[col] = Vectorized::loadu(B + k * ldb + col * VLEN);\n"
if PF:
    base = cmg.CppMicroGemmFP32Vec
    assert base.TEMPLATE_KERNEL.count(LOAD) == 1
    hint = f"            _mm_prefetch(reinterpret_cast<const char*>(B + (k + {PF}) * ldb + col * VLEN), _MM_HINT_{HINT});\n"

    class Prefetching(base):
        TEMPLATE_KERNEL = base.TEMPLATE_KERNEL.replace(LOAD, hint + LOAD)

    cmg.micro_gemm_configs[Prefetching] = cmg.micro_gemm_configs.pop(base)
tag = f"pf{PF}" + (HINT.lower() if PF and HINT != "T0" else "")
inductor_cache(f"/tmp/s64/ind_{tag}")
store = Path(f"/tmp/s64/store_{tag}")
lm = load_model("smollm2-135m", "float32", path="default", threads=2)
compile_forward(lm.model, store=store)
engine = ModelEngine(lm.model)
ctx = 200
with torch.inference_mode():
    engine.start(torch.arange(100, 100 + ctx)[None], capacity=ctx + 100)
    for k in (1, 8):
        forward_ms(engine, k, 1, ctx)
    huge_pages()
    print(json.dumps({"tag": tag, "huge_bytes": anon_huge_bytes()}), flush=True)
    if os.environ.get("MODE", "time") == "time":
        for r in range(int(os.environ.get("ROUNDS", "4"))):
            ms = {k: forward_ms(engine, k, 9, ctx) for k in (1, 8)}
            print(json.dumps({"tag": tag, "round": r, "k1": round(ms[1], 2), "k8": round(ms[8], 2),
                              "k8_k1": round(ms[8] / ms[1], 3)}), flush=True)


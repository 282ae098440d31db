"""Probe (session 64, issue 32): does a software prefetch in inductor's fp32 GEMM micro-kernel let SmolLM2's
8-token step overlap its weight stream with its arithmetic? PF = prefetch distance in rows of the packed weight
(0: inductor's kernel as shipped). Each PF builds its 1- and 8-token packages into its own store and inductor
cache. MODE=build only builds; MODE=time: ROUNDS rounds of median-of-9 k1 and k8 after 200 cached tokens.
The patch swaps inductor's fp32 micro-kernel class for a subclass whose template adds one _mm_prefetch per
weight vector load; the arithmetic (and so every bit) is unchanged. (Set-up through engine_table.warm_k1_k8 since
the run recorded here, which did the same steps inline.)"""
import json
import os
from pathlib import Path

import torch._inductor.compile_fx  # noqa: F401  (imports the codegen modules in their working order)
from torch._inductor.codegen import cpp_micro_gemm as cmg

from fastforward.bench.engine_table import forward_ms, warm_k1_k8
from fastforward.core.compiled import inductor_cache
from fastforward.core.memory import anon_huge_bytes

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
with warm_k1_k8("smollm2-135m", "float32", store) as engine:
    print(json.dumps({"tag": tag, "huge_bytes": anon_huge_bytes()}), flush=True)
    if os.environ.get("MODE", "time") == "time":
        for r in range(int(os.environ.get("ROUNDS", "4"))):
            ms = {k: forward_ms(engine, k, 9, 200) for k in (1, 8)}
            print(json.dumps({"tag": tag, "round": r, "k1": round(ms[1], 2), "k8": round(ms[8], 2),
                              "k8_k1": round(ms[8] / ms[1], 3)}), flush=True)

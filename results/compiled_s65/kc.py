"""Probe (session 65, issue 32): inductor's GEMM template splits K into L1-sized chunks (Kc) even when the
product has one block of rows (M <= 8 here), where no other row block reuses the chunk; does a package with
K whole (inductor's public ``cpp.gemm_cache_blocking``) let SmolLM2's 8-token step overlap its weight stream
with its arithmetic? KC=full builds with Kc = K (Mc = all row blocks, Nc = 1), KC=default as inductor chooses.
The accumulation order of every output is unchanged (the chunks carried it through C), so every bit is too.
Each variant builds its 1- and 8-token packages into its own store and inductor cache. MODE=build only
builds; MODE=time: ROUNDS rounds of median-of-9 k1 and k8 after 200 cached tokens."""
import json
import os
from pathlib import Path

import torch._inductor.config as inductor_config

from fastforward.bench.engine_table import forward_ms, warm_k1_k8
from fastforward.core.compiled import inductor_cache
from fastforward.core.memory import anon_huge_bytes

KC = os.environ.get("KC", "default")
if KC.startswith("full"):
    inductor_config.cpp.gemm_cache_blocking = "1000000,1,1000000"
if KC.endswith("peel"):  # g++ told to unroll the accumulators' zeroing loop whole (no memset): see the docstring
    inductor_config.cpp.cxx = (None, os.environ.get("CXX_PEEL", "/tmp/s65/bin/peel-g++"))
root = Path(os.environ.get("ROOT", "/tmp/s65"))
inductor_cache(str(root / f"ind_{KC}"))
store = root / f"store_{KC}"
with warm_k1_k8("smollm2-135m", "float32", store) as engine:
    print(json.dumps({"kc": KC, "huge_bytes": anon_huge_bytes()}), flush=True)
    if os.environ.get("MODE", "time") == "time":
        for r in range(int(os.environ.get("ROUNDS", "4"))):
            ms = {k: forward_ms(engine, k, 9, 200) for k in (1, 8)}
            print(json.dumps({"kc": KC, "round": r, "k1": round(ms[1], 2), "k8": round(ms[8], 2),
                              "k8_k1": round(ms[8] / ms[1], 3)}), flush=True)

"""Build one compiled package in a process of its own (``MODEL``, ``DTYPE``, ``WIDTH``): the 1.5B's bf16
8-token build needs ~15 GB on top of the process, which a process already holding the 1-token package lacks
on a 23 GiB machine (the engine then runs that width eagerly and says so). Nothing is timed here."""

import os
import time

import torch

from fastforward.core.compiled import inductor_cache
from fastforward.core.engine import compile_forward, warm_buckets
from fastforward.models.cache import cache_root, compiled_dir
from fastforward.models.loading import load_model

inductor_cache(str(cache_root()))
lm = load_model(os.environ.get("MODEL", "qwen2.5-coder-1.5b"), os.environ.get("DTYPE", "bfloat16"), path="default", threads=2)
compile_forward(lm.model, store=compiled_dir())
width = int(os.environ.get("WIDTH", "8"))
t0 = time.perf_counter()
with torch.inference_mode():
    print(f"width {width}: warm_buckets {warm_buckets(lm.model, (width,)):.1f} s, {time.perf_counter() - t0:.1f} s in all", flush=True)

"""SmolLM2-135M float32's compiled 1- and 8-token steps in one process (session 60, k8_spread.txt): medians of 20
after 200 cached tokens, with the process's CPU time over wall time (``cpuK``), the busy threads' CPU ticks
(``thrK``), its bytes on huge pages, and then its large mappings (name, MB resident, MB on huge pages).
Run from the repository root, nothing else running: PYTHONPATH=src python results/compiled_s60/probe.py"""

import json
import os
import time

import torch

from fastforward.bench.engine_table import forward_ms
from fastforward.core.compiled import inductor_cache
from fastforward.core.engine import ModelEngine, compile_forward
from fastforward.models.cache import cache_root, compiled_dir
from fastforward.models.loading import load_model


def threads() -> dict[str, tuple[int, int]]:
    """Per thread of this process: (user + system CPU ticks, the CPU it last ran on)."""
    out = {}
    for t in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{t}/stat") as f:
            s = f.read().rsplit(")", 1)[1].split()
        out[t] = (int(s[11]) + int(s[12]), int(s[36]))
    return out


def big_mappings(least_mb: int = 50) -> list[list]:
    """[name, MB resident, MB on huge pages] of each mapping with more than ``least_mb`` MB resident."""
    cur, big = None, []
    with open("/proc/self/smaps") as f:
        for line in f:
            parts = line.split()
            if "-" in parts[0] and len(parts) >= 5 and not parts[0].endswith(":"):
                cur = [parts[5] if len(parts) > 5 else "[anon]", 0, 0]
            elif parts[0] == "Rss:" and cur is not None:
                cur[1] = int(parts[1]) // 1024
                if cur[1] > least_mb:
                    big.append(cur)
            elif parts[0] == "AnonHugePages:" and cur in big:
                cur[2] = int(parts[1]) // 1024
    return big


inductor_cache(str(cache_root()))
lm = load_model("smollm2-135m", "float32", path="default", threads=2)
compile_forward(lm.model, store=compiled_dir())
res: dict = {}
with torch.inference_mode():
    engine = ModelEngine(lm.model)
    engine.start(torch.arange(100, 300)[None], capacity=300)
    for k in (1, 8):
        forward_ms(engine, k, 1, 200)
    for k in (1, 8):
        a, t0, c0 = threads(), time.perf_counter(), os.times()
        res[k] = round(forward_ms(engine, k, 20, 200), 2)
        wall, c1, b = time.perf_counter() - t0, os.times(), threads()
        busy = {t: b[t][0] - a.get(t, (0, 0))[0] for t in b if b[t][0] - a.get(t, (0, 0))[0] > 0}
        res[f"cpu{k}"] = round((c1.user + c1.system - c0.user - c0.system) / wall, 2)
        res[f"thr{k}"] = sorted(busy.values(), reverse=True)[:4]
        res[f"lastcpu{k}"] = sorted(b[t][1] for t in busy)
    engine.close()
with open("/proc/self/smaps_rollup") as f:
    res["anonhuge"] = next(line.split()[1] for line in f if line.startswith("AnonHugePages"))
res["nthreads"] = len(os.listdir("/proc/self/task"))
print(json.dumps(res), flush=True)
print(json.dumps(big_mappings()))

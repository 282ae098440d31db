"""Probe (session 64): the 1.5B W8A8 1-token step reads ~34 or ~52 ms and can flip between the two inside one
process. Per round (median of 15 steps) this prints the step, the process's bytes on 2 MB pages, and which CPU
each of the process's threads last ran on, to see what changes with the flip. python k1_flip.py PACKAGE"""
import os
import statistics
import sys
import time

import torch

from fastforward.core import aot
from fastforward.core.memory import anon_huge_bytes, huge_pages

torch.set_num_threads(2)
K, CTX, SIZE, L, H, D = 1, 200, 512, 28, 2, 128
ids = torch.randint(100, 1000, (1, K))
pos = torch.arange(CTX, CTX + K)[None]
mask = torch.full((1, 1, K, SIZE), float("-inf"))
mask[0, 0, 0, : CTX + 1] = 0
where = torch.arange(CTX, CTX + K)
kv = [torch.randn(1, H, SIZE, D) * 0.1 for _ in range(2 * L)]
run = aot.load(sys.argv[1])


def cpus() -> str:
    out = []
    for tid in sorted(os.listdir("/proc/self/task")):
        with open(f"/proc/self/task/{tid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        out.append(f"{fields[36]}:{int(fields[11]) + int(fields[12])}")  # last CPU : utime+stime ticks
    return " ".join(out)


with torch.inference_mode():
    run(ids, pos, mask, where, *kv)
    huge_pages()
    for rnd in range(int(os.environ.get("ROUNDS", "16"))):
        ts = []
        for _ in range(15):
            t = time.perf_counter()
            run(ids, pos, mask, where, *kv)
            ts.append(time.perf_counter() - t)
        print(rnd, round(statistics.median(ts) * 1e3, 2), "huge", anon_huge_bytes() >> 20, "MB", "threads", cpus(),
              flush=True)

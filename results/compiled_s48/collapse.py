"""Probe: how much of a process huge_pages() moves onto 2 MB pages, and how long it takes, after warming the given buckets.
Run: PYTHONPATH=src .venv/bin/python results/compiled_s48/collapse.py MODEL WEIGHTS WIDTHS (e.g. qwen2.5-coder-1.5b int8 1,2,4,8)."""
import sys, time, torch
torch.set_num_threads(2)
from fastforward.models.loading import load_model
from fastforward.cli.common import compile_target
from fastforward.core.engine import warm_buckets
from fastforward.core.memory import huge_pages, anon_huge_bytes
lm = load_model(sys.argv[1], "bfloat16", "cpu", 2, "default", False, sys.argv[2])
compile_target(lm, 128)
warm_buckets(lm.model, tuple(int(w) for w in sys.argv[3].split(",")), sizes=(512,))
print("before", anon_huge_bytes() / 1e9, flush=True)
t = time.perf_counter(); h = huge_pages(); print(f"huge_pages {h/1e9:.2f} GB in {time.perf_counter()-t:.1f} s", flush=True)
t = time.perf_counter(); h = huge_pages(); print(f"again {h/1e9:.2f} GB in {time.perf_counter()-t:.1f} s", flush=True)

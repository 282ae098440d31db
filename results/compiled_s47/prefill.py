"""Probe: where the eager prefill of a ~150-token prompt goes (bf16 compiled SmolLM2), by op."""
import os, time, statistics as st, torch
torch.set_num_threads(2)
from fastforward.models.loading import load_model
from fastforward.cli.common import compile_target
from fastforward.core.engine import ModelEngine
lm = load_model("smollm2-135m", os.environ.get("DTYPE", "bfloat16"), "cpu", 2, "default", False, "full")
compile_target(lm, 128)
eng = ModelEngine(lm.model)
n = int(os.environ.get("N", 150))
ids = torch.randint(0, 49000, (1, n))
def once():
    t = time.perf_counter(); eng.start(ids, capacity=n + 129, room=32); return (time.perf_counter() - t) * 1e3
for _ in range(2): once()
ts = [once() for _ in range(7)]
print(f"prefill {n} tokens: median {st.median(ts):.1f} ms, min {min(ts):.1f}")
if os.environ.get("PROF"):
    from torch.profiler import profile, ProfilerActivity
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as p:
        for _ in range(3): once()
    print(p.key_averages(group_by_input_shape=True).table(sort_by="self_cpu_time_total", row_limit=12, max_name_column_width=40, max_shapes_column_width=90))

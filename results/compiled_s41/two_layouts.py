"""Probe (issue 32, session 41): SmolLM2-135M fp32 compiled steps per width with every linear layer in two
layouts, the plain weight for 1-row calls (ATen's GEMV, which streams it at bandwidth) and oneDNN's layout
for 8 rows for wider calls (torch.ops.mkldnn, what --path prepacked runs eagerly), against the packages as
they are (plain weights, ATen/MKL GEMMs for every width, one copy shared by the buckets).

The two-layout packages cannot share one copy of the reordered weights: those are opaque oneDNN tensors,
which AOTInductor's on-disk weight format cannot pickle, so the k >= 2 buckets are built with their own copy
(the library's one-line fallback), and giving them a shared copy after loading would need the package's
constant names, which freezing and constant folding reduce to `_tensor_constantN` / `constantN`, with
duplicates (printed below). So this measures copies per bucket.

usage: PYTHONPATH=src python results/compiled_s41/two_layouts.py two|plain STORE
  two: the module swap above, packages in STORE (built on first use, ~12 min here);
  plain: the library's packages (STORE: the default ~/.cache/fastforward/compiled finds them built).
Widths 1, 2, 4, 8, 16 are timed in turns (20 rounds, the first 2 dropped, medians) over 128 cached tokens."""

import statistics as st
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from fastforward.core.engine import Block, ModelEngine, compile_forward
from fastforward.models.loading import load_model

torch.set_num_threads(2)
MODE, STORE = sys.argv[1], Path(sys.argv[2])


class TwoLayouts(torch.nn.Module):
    """A linear layer: its plain weight for one row, oneDNN's 8-row layout of it for more."""

    def __init__(self, linear: torch.nn.Linear) -> None:
        super().__init__()
        self.weight, self.bias, self.in_features = linear.weight, linear.bias, linear.in_features
        self.packed = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach(), 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.numel() // self.in_features == 1:
            return F.linear(x, self.weight, self.bias)
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")


model = load_model("smollm2-135m", "float32").model
if MODE == "two":
    with torch.no_grad():
        for parent in list(model.modules()):
            for name, child in list(parent.named_children()):
                if type(child) is torch.nn.Linear:
                    setattr(parent, name, TwoLayouts(child))
runner = compile_forward(model, mode="max-autotune", store=STORE)
gen = torch.Generator().manual_seed(0)
ctx, widths = 128, (1, 2, 4, 8, 16)
prefix = torch.randint(0, 49000, (1, ctx), generator=gen)
blocks = {k: Block.chain(torch.randint(0, 49000, (k,), generator=gen).tolist()) for k in widths}
eng = ModelEngine(model)
eng.start(prefix, capacity=ctx + 1, room=32)
t0 = time.time()
for k in widths:
    eng.forward([blocks[k]])
    eng.truncate(0, ctx)
print(f"built/loaded in {time.time() - t0:.1f} s", flush=True)
for key, run in runner._packages.items():
    names = getattr(run, "get_constant_fqns", lambda: [])()
    if key[0] > 1 and names:
        tensors = [n for n in names if n.startswith("_tensor_constant")]
        print(
            f"k={key[0]} package: {len(names)} constants, {len(set(names))} distinct names, "
            f"{len(tensors)} named _tensor_constantN; {sum(isinstance(m, TwoLayouts) for m in model.modules())} "
            "reordered weights in the model"
        )
        break
times: dict[int, list[float]] = {k: [] for k in widths}
for _ in range(20):
    for k in widths:
        t = time.perf_counter()
        eng.forward([blocks[k]])
        times[k].append((time.perf_counter() - t) * 1e3)
        eng.truncate(0, ctx)
med = {k: st.median(v[2:]) for k, v in times.items()}
print(MODE, " ".join(f"k{k} {v:.1f}" for k, v in med.items()), f" k8/k1 {med[8] / med[1]:.2f}", flush=True)

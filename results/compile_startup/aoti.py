"""AOTInductor feasibility (issue 32): export the K-token decode forward of SmolLM2 over a fixed cache whose
key/value buffers are inputs (mutated in place), compile it to a package with max-autotune + freezing, load
it in a new process and time it; check logits against eager.

    python results/compile_startup/aoti.py build K [blob]   # export, compile, load, time
    python results/compile_startup/aoti.py load K [blob]    # in a new process: load the package, time
"""

import json
import sys
import time

import torch

from fastforward.core.cache import FixedCache, FixedLayer
from fastforward.core.compiled import share_kv_heads
from fastforward.core.engine import model_call
from fastforward.models.loading import load_model

CAP, K = 512, int(sys.argv[2]) if len(sys.argv) > 2 else 1
BLOB = "blob" in sys.argv[3:]
lm = load_model("smollm2-135m", threads=2)
model = lm.model
share_kv_heads(model)
cfg = model.config
L, H, D = cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.hidden_size // cfg.num_attention_heads


class Step(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids, pos, mask, where, *kv):
        cache = FixedCache(CAP)
        cache.slots.where = where
        for i in range(L):
            layer = FixedLayer(CAP, cache.slots)
            layer.keys, layer.values = kv[2 * i], kv[2 * i + 1]
            layer.dtype, layer.device, layer.is_initialized = kv[0].dtype, kv[0].device, True
            cache.layers.append(layer)
        return model_call(self.model, ids, pos, mask, cache).logits


def inputs(n_cached=200):
    ids = torch.tensor([[5] * K])
    pos = torch.arange(n_cached, n_cached + K)[None]
    allowed = torch.zeros(1, 1, K, CAP, dtype=torch.bool)
    allowed[..., : n_cached + K] = True
    mask = torch.where(allowed, 0.0, float("-inf"))
    where = torch.arange(n_cached, n_cached + K)
    gen = torch.Generator().manual_seed(0)
    kv = [torch.randn(1, H, CAP, D, generator=gen) * 0.1 for _ in range(2 * L)]
    return ids, pos, mask, where, kv


def median_ms(fn, n: int) -> float:
    """The median wall time of ``n`` calls of ``fn``, in ms."""
    ms = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        ms.append((time.perf_counter() - t) * 1e3)
    return round(sorted(ms)[n // 2], 1)


out = {}
pkg = f"/tmp/fastforward_aoti_step{K}{'_blob' * BLOB}.pt2"  # about 1 GB
step = Step(model).eval()
ids, pos, mask, where, kv = inputs()
with torch.inference_mode():
    ref = step(ids, pos, mask, where, *[t.clone() for t in kv])
if sys.argv[1] == "build":
    t = time.perf_counter()
    with torch.no_grad():
        ep = torch.export.export(step, (ids, pos, mask, where, *[t.clone() for t in kv]), strict=False)
    out["export_s"] = round(time.perf_counter() - t, 1)
    t = time.perf_counter()
    torch._inductor.aoti_compile_and_package(
        ep,
        package_path=pkg,
        inductor_configs={
            "freezing": True,
            "max_autotune": True,
            # "blob": the weights as a separate file in the package instead of inside the .so
            "aot_inductor.package_constants_in_so": not BLOB,
            **({"aot_inductor.package_constants_on_disk_format": "binary_blob"} if BLOB else {}),
        },
    )
    out["compile_s"] = round(time.perf_counter() - t, 1)
t = time.perf_counter()
runner = torch._inductor.aoti_load_package(pkg)
out["load_s"] = round(time.perf_counter() - t, 2)
with torch.inference_mode():
    kv2 = [t.clone() for t in kv]
    got = runner(ids, pos, mask, where, *kv2)
    got = got[0] if isinstance(got, (list, tuple)) else got
    out["max_abs_diff"] = float((got - ref).abs().max())
    out["kv_written"] = bool((kv2[0][:, :, 200] != kv[0][:, :, 200]).any())
    out[f"aoti_ms_{K}"] = median_ms(lambda: runner(ids, pos, mask, where, *kv2), 20)
    out[f"eager_ms_{K}"] = median_ms(lambda: step(ids, pos, mask, where, *kv2), 12)
print(json.dumps(out))

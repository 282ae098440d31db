"""Compiled forwards kept on disk: one AOTInductor package per (model, width bucket, hidden states, cache size).

Why: the compiled CPU forward is fast because inductor freezes the weights and lays them out for its own
GEMM micro-kernels (SmolLM2-135M fp32, 2-core AVX-512 EPYC: 14-16 ms per 1-token forward against ~40 eager).
Those laid-out weights are mkldnn tensors, which inductor cannot pickle, so ``torch.compile`` skips its
on-disk graph cache for exactly these graphs and every new process lowers every bucket again (~55 s of a
first compile's ~80 s per bucket there; results/compile_startup). AOTInductor compiles the same frozen
forward ahead of time into a shared library with the laid-out weights inside; a new process loads it in a
few seconds and runs it at the same speed (measured: the 1-token package built in ~65-100 s, loaded
by a new process in 0.5-1.5 s, 16.3 ms against 40.8 eager per forward).

How: :class:`Step` is the engine's forward (:func:`fastforward.core.engine.model_call`) over a
:class:`fastforward.core.cache.FixedCache` whose key/value buffers are *inputs*, written in place by the
package, so one package serves every request whose row fits that cache size. It is exported with
``torch.export`` (non-strict: transformers' Python runs as written) and compiled with
``aoti_compile_and_package``. Packages live under ``<store>/<fingerprint>/``; the fingerprint covers what
changes the compiled code or its weights (:func:`fingerprint`), so a changed model, dtype, weight format,
torch, transformers or CPU ISA builds anew instead of loading a stale package. A package is written to a
temporary name and renamed when whole, so two processes building the same one never leave a torn file.

Cost: each package holds its own copy of the laid-out weights, plus the embedding table the kernels
gather from: 0.66 GB per bucket for SmolLM2-135M fp32 (0.54 GB of parameters), so a run that uses buckets
1, 2, 4 and 8 keeps ~2.6 GB on disk. Deleting ``<store>`` only costs the next run its compile.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from fastforward.core.cache import FixedCache, FixedLayer

FORMAT = 1  # bump when Step's inputs or outputs change: older packages are then never loaded
SAMPLE = 4096  # values hashed per weight tensor (strided over all of it)


def _tensor_digest(h: Any, name: str, t: torch.Tensor) -> None:
    """Feed ``h`` a tensor's name, shape, dtype and a strided sample of its values. A sample, not every
    byte: hashing a 1.5B model whole takes seconds on every start, while any training or re-quantization
    changes values throughout a tensor, which the strided sample sees."""
    h.update(f"{name}:{tuple(t.shape)}:{t.dtype}".encode())
    flat = t.detach().reshape(-1)
    if flat.numel():
        stride = max(1, flat.numel() // SAMPLE)
        h.update(flat[::stride][:SAMPLE].contiguous().cpu().view(torch.uint8).numpy().tobytes())


def fingerprint(model: torch.nn.Module, *extra: object) -> str:
    """A short hash naming everything a package's code and weights depend on: the model's class, config
    (attention implementation included), weights (every state-dict tensor, sampled), their kernel path and
    quantization, torch and transformers versions, the CPU ISA torch dispatches to (and any oneDNN cap),
    the thread count the GEMMs were tuned for, this module's :data:`FORMAT`, and ``extra``."""
    import transformers

    h = hashlib.sha256()
    config = getattr(model, "config", None)
    parts = [
        FORMAT,
        type(model).__qualname__,
        config.to_json_string(use_diff=False) if config is not None else "",
        getattr(config, "_attn_implementation", None),
        getattr(model, "fastforward_path", None),
        getattr(model, "fastforward_weights", None),
        torch.__version__,
        transformers.__version__,
        torch.backends.cpu.get_cpu_capability(),
        os.environ.get("ONEDNN_MAX_CPU_ISA", ""),
        torch.get_num_threads(),
        *extra,
    ]
    h.update(json.dumps(parts, default=str).encode())
    for name, t in model.state_dict().items():
        _tensor_digest(h, name, t)
    return h.hexdigest()[:16]


class Step(torch.nn.Module):
    """The decode forward over a fixed cache whose buffers are inputs: ``(ids [1, k], pos [1, k], mask
    [1, 1, k, size], where [k], *kv)`` -> logits (and the last layer's hidden states when ``hidden``), with
    ``kv`` = each layer's keys then values ``[1, H, size, D]``, written at slots ``where`` in place."""

    def __init__(self, model: torch.nn.Module, call: Callable[..., Any], size: int, hidden: bool) -> None:
        super().__init__()
        self.model, self.size, self.hidden = model, size, hidden
        self._call = call

    def forward(
        self, ids: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor, where: torch.Tensor, *kv: torch.Tensor
    ):
        cache = FixedCache(self.size)
        cache.slots.where = where
        for keys, values in zip(kv[0::2], kv[1::2], strict=True):
            layer = FixedLayer(self.size, cache.slots)
            layer.keys, layer.values = keys, values
            layer.dtype, layer.device, layer.is_initialized = keys.dtype, keys.device, True
            cache.layers.append(layer)
        out = self._call(self.model, ids, pos, mask, cache, hidden=self.hidden)
        return (out.logits, out.hidden_states[-1]) if self.hidden else (out.logits,)


def cache_buffers(cache: FixedCache) -> list[torch.Tensor]:
    """The fixed cache's buffers in :class:`Step`'s order (every layer's keys, then its values)."""
    return [t for layer in cache.layers for t in (layer.keys, layer.values)]


def package_name(k: int, hidden: bool, size: int) -> str:
    return f"k{k}{'-hidden' if hidden else ''}-s{size}.pt2"


def build(
    model: torch.nn.Module,
    call: Callable[..., Any],
    example: tuple[torch.Tensor, ...],
    hidden: bool,
    path: Path,
    autotune: bool,
) -> None:
    """Export and compile :class:`Step` for ``example``'s shapes into the package ``path`` (written whole
    or not at all). ``autotune``: inductor's max-autotune GEMM templates (where the CPU speed comes from;
    off for tiny test models, where it only costs time)."""
    ids, pos, mask, where, *kv = example
    size = int(mask.shape[-1])
    step = Step(model, call, size, hidden).eval()
    with torch.no_grad():  # traced on copies: tracing never writes the live cache
        program = torch.export.export(step, (ids, pos, mask, where, *[t.clone() for t in kv]), strict=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(f".{path.stem}.{os.getpid()}.part.pt2")  # renamed to path when whole
    try:
        with warnings.catch_warnings():  # inductor's own deprecation notices are not the user's to act on
            warnings.simplefilter("ignore", UserWarning)
            torch._inductor.aoti_compile_and_package(
                program,
                package_path=str(part),
                inductor_configs={"freezing": True, "max_autotune": autotune},
            )
        os.replace(part, path)
    finally:
        part.unlink(missing_ok=True)


def load(path: Path) -> Callable[..., Any]:
    """A built package, ready to call with :class:`Step`'s inputs (returns a list of its outputs)."""
    return torch._inductor.aoti_load_package(str(path))


def describe(store: Path, fp: str, model: torch.nn.Module) -> None:
    """Write ``<store>/<fp>/about.json``: which model, torch and ISA its packages are for (for people who
    look in the cache directory; nothing reads it back)."""
    about = store / fp / "about.json"
    if about.exists():
        return
    about.parent.mkdir(parents=True, exist_ok=True)
    config = getattr(model, "config", None)
    info = {
        "model": getattr(config, "_name_or_path", "") or type(model).__name__,
        "class": type(model).__qualname__,
        "dtype": str(next(model.parameters()).dtype),
        "weights": getattr(model, "fastforward_weights", None) or "full",
        "torch": torch.__version__,
        "isa": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(),
        "written": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    about.write_text(json.dumps(info, indent=1) + "\n")

"""What a forward over k new tokens of a loaded model costs on this machine, measured and cached.

Every parallel method trades target forwards for wider ones; whether that pays depends on the curve
ms(k) / ms(1) of the model in the dtype and kernel path used, which differs between CPUs (AVX-512 with
bf16 instructions: bf16 ~1.1-1.4x at k=16; AVX2 only: bf16 5-11x, fp32 ~2-3x with the default GEMM). So the
curve is measured, not assumed: once per (model, dtype, path, ISA, torch, threads, and the compiled graphs'
fingerprint when the model has them), through the engine's own step, cached as JSON under
``$FASTFORWARD_CACHE/costs``. It lives beside the models because decoders read it too (Chimera sizes its
trees from it); the choices made from recorded curves are in :mod:`fastforward.bench.costs`.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path

import torch

from fastforward.core.compiled import bucket, compiled
from fastforward.core.engine import Block, ModelEngine
from fastforward.hardware import cpu_isa
from fastforward.log import log
from fastforward.models.kernels import path_of
from fastforward.models.loading import LoadedModel, cache_root

KS = (1, 2, 4, 8, 16, 32)
VERIFY_K = 8  # block size a parallel method's verify forward is costed at


def engine_of(model: torch.nn.Module) -> str:
    """Which forward a step of ``model`` runs, as its costs are filed: ``eager``, or its compiled graphs'
    :meth:`~fastforward.core.compiled.CompiledForward.identity` (their costs differ in size and in shape:
    SmolLM2 fp32, AVX-512: k=8 costs ~1.1x k=1 eagerly and 1.3-1.6x compiled)."""
    runner = compiled(model)
    return "eager" if runner is None else runner.identity()


@torch.inference_mode()
def widths_ms(
    model: torch.nn.Module, ks: tuple[int, ...], context: int = 128, repeats: int = 5
) -> dict[int, float]:
    """Median wall time (ms) of one verify step's forward over ``k`` new tokens for each ``k`` in ``ks``,
    after a cached ``context``-token prefix, logits for every new token, through the engine's step as
    methods run it (:class:`~fastforward.core.engine.ModelEngine`: a compiled model's bucket graph over its
    fixed cache, else the eager forward over the static cache), inputs and mask included. The row is cut
    back to the prefix after each.

    The widths take turns, round after round (the first a warm-up), so that a machine whose speed drifts
    (a shared host: +-15-30%) moves every width alike and the curve's shape, which decides tree sizes and
    is kept on disk, does not carry one width's unlucky moment.

    Decoders time it when they are built, before any request: a compiled forward held by a request would
    leave the row eager (:attr:`ModelEngine.ran`), and the curve would be the eager one."""
    device = next(model.parameters()).device
    vocab = model.config.get_text_config().vocab_size
    gen = torch.Generator().manual_seed(0)
    prefix = torch.randint(0, vocab, (1, context), generator=gen).to(device)
    blocks = {k: Block.chain(torch.randint(0, vocab, (k,), generator=gen).tolist()) for k in ks}
    engine = ModelEngine(model)
    times: dict[int, list[float]] = {k: [] for k in ks}
    try:
        engine.start(prefix, capacity=context + 1, room=max(ks))
        for i in range(repeats + 1):
            for k in ks:
                t = time.perf_counter()
                engine.forward([blocks[k]])
                if i:
                    times[k].append((time.perf_counter() - t) * 1e3)
                engine.truncate(0, context)
    finally:
        engine.close()
    return {k: sorted(ts)[len(ts) // 2] for k, ts in times.items()}


def measure_curve(model: torch.nn.Module, ks: tuple[int, ...] = KS, context: int = 128) -> list[dict]:
    """``k, ms`` records for a bare model (no name or dtype to cache under): what a decoder measures for
    itself when it was built without the per-machine cached curve."""
    engine = engine_of(model)
    ms = widths_ms(model, tuple(sorted(set(ks) | {1})), context, repeats=3)
    return [{"k": k, "ms": v, "engine": engine} for k, v in ms.items()]


def interpolate(curve: list[dict]) -> Callable[[int], float]:
    """ms(k) for any k >= 1 from a measured curve: linear between measured points, and past the widest one
    along the last segment's slope (a forward's cost keeps growing with k). A curve measured through
    compiled graphs is a staircase instead: k tokens run the graph of the next bucket (padded), so they
    cost what that bucket was measured at (k=5 costs k=8's), and only past the widest bucket grows."""
    pts = sorted((int(r["k"]), float(r["ms"])) for r in curve)
    if not pts:
        raise ValueError("an empty cost curve")
    stepped = all(str(r.get("engine", "eager")).startswith("compiled") for r in curve)
    measured = dict(pts)

    def ms(k: int) -> float:
        if stepped and (b := bucket(k)) is not None and b in measured:
            return measured[b]
        if k <= pts[0][0] or len(pts) == 1:
            return pts[0][1] if k <= pts[0][0] else pts[0][1] * k / pts[0][0]
        for (k0, m0), (k1, m1) in pairwise(pts):
            if k <= k1:
                return m0 + (m1 - m0) * (k - k0) / (k1 - k0)
        (k0, m0), (k1, m1) = pts[-2], pts[-1]
        return m1 + (m1 - m0) * (k - k1) / (k1 - k0)

    return ms


def step_ratio(loaded: LoadedModel, width: int) -> float:
    """What a ``width``-token step costs over a 1-token step on this machine, from the cached cost curve
    (measured once and stored when missing): a step gate's prior before it has timed a step of its own."""
    curve = interpolate(cached_curve(loaded, ks=KS))
    return curve(width) / curve(1)


def cost_curve(
    loaded: LoadedModel, ks: tuple[int, ...] = KS, context: int = 128, repeats: int = 5
) -> list[dict]:
    """Records ``model, dtype, isa, path, engine, k, ms, relative_to_k1`` (the ``cost_curves`` schema, and
    which forward was timed: ``eager`` or the compiled graphs' identity)."""
    ms = widths_ms(loaded.model, tuple(sorted(set(ks) | {1})), context, repeats)
    isa, path, engine = cpu_isa(), path_of(loaded.model), engine_of(loaded.model)
    return [
        {"model": loaded.name, "dtype": loaded.dtype, "isa": isa, "path": path, "engine": engine, "k": k,
         "ms": round(ms[k], 3), "relative_to_k1": round(ms[k] / ms[1], 3)}
        for k in ks
    ]  # fmt: skip


def cache_file(model: str, dtype: str, path: str, context: int = 128, engine: str = "eager") -> Path:
    key = (
        f"{model}-{dtype}-{path}-ctx{context}-{cpu_isa()}-torch{torch.__version__}-{torch.get_num_threads()}t"
    )
    if engine != "eager":  # compiled graphs: their own costs, per set of graphs
        key += f"-{engine}"
    return cache_root() / "costs" / (re.sub(r"[^A-Za-z0-9.+_-]+", "_", key) + ".json")


def read_curve(f: Path) -> list[dict] | None:
    """The curve stored in ``f``, or None when there is none; a file that does not read as ``k, ms`` records
    (cut short, edited) is said in one line and taken as none, so the caller measures again."""
    if not f.exists():
        return None
    try:
        cached = json.loads(f.read_text())
        if not isinstance(cached, list):
            raise TypeError("not a list of records")
        for r in cached:
            r["k"], r["ms"] = int(r["k"]), float(r["ms"])
    except (ValueError, TypeError, KeyError) as e:
        log(f"cost curve {f} does not read ({type(e).__name__}); measuring it again")
        return None
    return cached


def cached_curve(
    loaded: LoadedModel, refresh: bool = False, ks: tuple[int, ...] = KS, context: int = 128, repeats: int = 5
) -> list[dict]:
    """The curve from the per-machine cache when it covers ``ks``; measured (and stored) otherwise. A cache
    file that does not read as a curve (cut short, edited) is said in one line and measured again: the
    decoders that size their steps by it (jacobi, lookahead, suffix, recycle, Chimera) read it when built."""
    f = cache_file(loaded.name, loaded.dtype, path_of(loaded.model), context, engine_of(loaded.model))
    cached = None if refresh else read_curve(f)
    if cached is not None and set(ks) <= {r["k"] for r in cached}:
        return [r for r in cached if r["k"] in ks]
    curve = cost_curve(loaded, ks, context, repeats)
    f.parent.mkdir(parents=True, exist_ok=True)
    tmp = f.with_suffix(".tmp")
    tmp.write_text(json.dumps(curve, indent=1))
    tmp.replace(f)
    return curve

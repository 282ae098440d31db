"""What to run given what a forward over k new tokens costs on this machine.

The curves themselves are measured and cached by :mod:`fastforward.models.costs` (re-exported here for
the commands that use both); the choices below (dtype and path for AR and for verify forwards) are pure
functions of recorded curves, testable with curves from both kinds of CPU.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from fastforward.log import log
from fastforward.models.costs import (  # noqa: F401  (re-exported: the commands import them from here)
    KS,
    VERIFY_K,
    cache_file,
    cached_curve,
    cost_curve,
    interpolate,
    measure_curve,
    read_curve,
)

# --------------------------------------------------------------------------- choices from recorded curves


@dataclass(frozen=True)
class Choice:
    dtype: str
    path: str
    ms: float  # forward cost at the k the choice was made for
    why: str


def _ms_at(curve: list[dict], k: int) -> float | None:
    """ms at ``k``, linearly interpolated between measured points; None outside the measured range."""
    pts = sorted((r["k"], r["ms"]) for r in curve)
    for (k0, m0), (k1, m1) in zip(pts, pts[1:], strict=False):
        if k0 <= k <= k1:
            return m0 + (m1 - m0) * (k - k0) / (k1 - k0)
    return pts[0][1] if pts and pts[0][0] == k else None


def group_curves(records: list[dict]) -> dict[tuple[str, str], list[dict]]:
    """Records of one model grouped by (dtype, path)."""
    out: dict[tuple[str, str], list[dict]] = {}
    for r in records:
        out.setdefault((r["dtype"], r["path"]), []).append(r)
    return out


def choose(records: list[dict], k: int) -> Choice:
    """The (dtype, path) with the cheapest forward over ``k`` tokens among the measured ones.

    k=1 is the AR / drafting choice; a parallel method asks at its block size. fp16 is never chosen for
    multi-token forwards here because it is not measured by default (its CPU GEMM grows fastest)."""
    costs = {
        config: ms
        for config, curve in sorted(group_curves(records).items())
        if (ms := _ms_at(curve, k)) is not None
    }
    if not costs:
        raise ValueError(f"no recorded cost curve covers k={k}")
    (dtype, path), ms = min(costs.items(), key=lambda item: item[1])
    others = ", ".join(f"{d}/{p} {m:.1f} ms" for (d, p), m in costs.items() if (d, p) != (dtype, path))
    why = f"k={k}: {dtype}/{path} {ms:.1f} ms" + (f" (vs {others})" if others else "")
    return Choice(dtype, path, ms, why)


def parallel_pays(records: list[dict], k: int, tokens_per_forward: float) -> bool:
    """Whether a method committing ``tokens_per_forward`` per k-token forward (in its best configuration)
    beats AR in AR's best configuration: cost per token ms(k)/tpf vs the cheapest 1-token forward."""
    return choose(records, k).ms / tokens_per_forward < choose(records, 1).ms


# --------------------------------------------------------------------------- --path auto: measured choice


def auto_config(
    model: str, dtype: str = "auto", path: str = "auto", k: int = VERIFY_K, device: str = "cpu"
) -> Choice:
    """``--path auto`` (and ``--dtype auto`` with it): the (dtype, path) with the cheapest forward over ``k``
    tokens for ``model`` on this machine, from its cost curves: cached ones when this machine has them,
    otherwise measured once now (k = 1 and 8, a few repeats) and cached. A fixed ``dtype`` or ``path``
    narrows the candidates. CUDA has no kernel paths to choose: ``default`` with the flag-based dtype.

    ``k`` is 1 for runs of AR-like methods only (their forwards are 1-token) and the verify block otherwise.
    """
    from fastforward.errors import FastForwardError
    from fastforward.hardware import resolve_dtype
    from fastforward.models.kernels import check_path
    from fastforward.models.loading import DTYPES, load_model, model_name

    if device.startswith("cuda"):
        d, _ = resolve_dtype(dtype, device)
        return Choice(d, "default" if path == "auto" else path, 0.0, "CUDA: no CPU kernel path to choose")
    dtypes = ["float32", "bfloat16"] if dtype == "auto" else [dtype]
    paths = ["default", "prepacked"] if path == "auto" else [path]
    name = model_name(model)
    records: list[dict] = []
    for d in dtypes:
        for p in paths:
            try:
                check_path(p, DTYPES[d])
            except FastForwardError:
                continue
            f = cache_file(name, d, p)
            cached = read_curve(f) or []
            if cached and _ms_at(cached, k) is not None:
                records += cached
                continue
            log(f"--path auto: measuring {name} {d}/{p} once on this machine (cached in {f.parent})")
            t0 = time.perf_counter()
            loaded = load_model(model, d, device, path=p)
            records += cached_curve(loaded, ks=tuple(sorted({1, VERIFY_K, k})), repeats=3)
            del loaded
            log(f"--path auto: {name} {d}/{p} measured in {time.perf_counter() - t0:.1f} s (once; cached)")
    if not records:
        raise FastForwardError(f"--path auto: no (dtype, path) of {dtypes} x {paths} runs on this machine")
    return choose(records, k)

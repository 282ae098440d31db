"""The CPU speed study (``fastforward cpu-speed``): cost curves, then methods side by side, flat records.

One process, one run: (1) the k-token forward cost curve of the model per (dtype, kernel path); (2) the
configuration with the cheapest 1-token forward is "the fastest AR we build", the one with the cheapest
8-token forward runs the parallel methods; (3) per dataset, ``run_bench`` on the parallel configuration
with AR in that same configuration as the baseline, plus AR in the fastest configuration as a second
baseline. Results go to one JSON file (schema of issue 13, ``runs`` / ``cost_curves``), rewritten after
every dataset; a dataset already in the file is skipped (resume after an interruption).

A ``draft`` (default smollm2-135m, for ``sd-cross`` and the draft-model methods) is loaded in the fastest-AR
configuration: drafting is one token at a time, so it wants the cheapest 1-token forward.
"""

from __future__ import annotations

import gc
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

from fastforward import hardware
from fastforward.bench.costs import KS, cached_curve, choose
from fastforward.bench.runner import run_bench
from fastforward.core.decoder import GenerationConfig
from fastforward.data import load_dataset
from fastforward.decoders.ar import ARDecoder
from fastforward.decoders.registry import build_decoders
from fastforward.errors import FastForwardError
from fastforward.log import log
from fastforward.models.kernels import check_path
from fastforward.models.loading import DTYPES, load_model

CANDIDATES = (
    ("float32", "default"),
    ("float32", "prepacked"),
    ("bfloat16", "default"),
    ("bfloat16", "prepacked"),
)
FASTEST_AR = "ar_fastest"


def stream_gbps(gib: float = 1.0, repeats: int = 3) -> float:
    """Read bandwidth (GB/s) as a sum over a large fp32 tensor sees it: the memory-bound limit of AR."""
    x = torch.ones(int(gib * 2**30 / 4))
    x.sum()
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        x.sum()
        best = min(best, time.perf_counter() - t)
    return x.numel() * 4 / best / 1e9


def bandwidth_limit(model: torch.nn.Module, gbps: float) -> dict[str, float]:
    """Weight bytes and the fastest a 1-token forward could be if it only streamed them once."""
    nbytes = sum(p.numel() * p.element_size() for p in model.parameters())
    return {
        "weight_bytes": nbytes,
        "stream_gbps": round(gbps, 2),
        "limit_ms_per_token": round(nbytes / gbps / 1e6, 1),
    }


def _records(result: dict[str, Any], config_of: dict[str, tuple[str, str]], fastest_tps: float) -> list[dict]:
    out = []
    fp32 = result["dtype"] == "float32"
    for name, m in result["methods"].items():
        if name == FASTEST_AR:
            method, lossless = "ar", True
        else:
            method, lossless = name, bool(m["lossless"])
        # agreement with fp32 AR: the run's baseline is fp32 AR when the parallel configuration is fp32
        ident = m["identical_to_ar"] if fp32 and lossless else None
        out.append({
            "model": result["model"], "dtype": config_of.get(name, (result["dtype"],))[0],
            "dataset": result["dataset"], "method": method, "label": name,
            "path": config_of.get(name, ("", result["path"]))[1], "lossless": lossless,
            "samples": m["samples"], "max_new_tokens": result["max_new_tokens"],
            "tokens_per_s": round(m["tokens_per_s"], 3), "speedup_vs_ar": round(m["speedup_vs_ar"], 3),
            "speedup_vs_fastest_ar": round(m["tokens_per_s"] / fastest_tps, 3) if fastest_tps else None,
            "tokens_per_forward": None if m["extras"].get("target_forwards_unknown") else round(m["mean_accepted_tokens"], 3),
            "draft_time_share": round(m["draft_time_share"], 3), "identical_to_ar_fp32": ident,
        })  # fmt: skip
    return out


def _write(out: Path, state: dict[str, Any]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=1) + "\n")
    tmp.replace(out)


def run_cpu_speed(
    model: str,
    datasets: list[str],
    methods: str,
    limit: int,
    max_new_tokens: int,
    out: Path,
    options: dict[str, Any],
    verify_k: int = 8,
    ks: tuple[int, ...] = KS,
    draft: str | None = None,
) -> dict[str, Any]:
    state: dict[str, Any] = json.loads(out.read_text()) if out.exists() else {}
    if state and state.get("model") != model:
        raise FastForwardError(
            f"{out} holds a study of {state.get('model')}, not {model}; choose another --out"
        )
    state.update(model=model, hardware=hardware.describe(), command=" ".join(sys.argv), draft=draft)
    state.setdefault("runs", [])

    curves: list[dict] = []
    for dtype, path in CANDIDATES:
        try:
            check_path(path, DTYPES[dtype])
        except FastForwardError as e:
            log(f"cost curve: skipping {dtype}/{path}: {e}")
            continue
        loaded = load_model(model, dtype, path=path)
        log(f"cost curve of {model} {dtype}/{path}")
        curves += cached_curve(loaded, ks=ks)
        if path == "default":
            state.setdefault("bandwidth", {})[dtype] = bandwidth_limit(loaded.model, stream_gbps())
        del loaded
        gc.collect()
    state["cost_curves"] = curves
    ar_pick, verify_pick = choose(curves, 1), choose(curves, verify_k)
    state["choice"] = {"ar": ar_pick.why, "verify": verify_pick.why}
    log(f"fastest AR: {ar_pick.why}; parallel methods: {verify_pick.why}")
    _write(out, state)  # the curves are finished work: keep them even if the benches are interrupted

    target = load_model(model, verify_pick.dtype, path=verify_pick.path)
    draft_model = load_model(draft, ar_pick.dtype, path=ar_pick.path) if draft else None
    decoders = build_decoders(methods, target, draft_model, options)
    config_of: dict[str, tuple[str, str]] = {}  # (dtype, path) of decoders not on the parallel configuration
    if (ar_pick.dtype, ar_pick.path) != (verify_pick.dtype, verify_pick.path):
        fastest = load_model(model, ar_pick.dtype, path=ar_pick.path)
        decoders[FASTEST_AR] = ARDecoder(fastest.model)
        config_of[FASTEST_AR] = (ar_pick.dtype, ar_pick.path)
    config = GenerationConfig(max_new_tokens=max_new_tokens, eos_token_ids=target.eos_token_ids)
    done = {r["dataset"] for r in state["runs"]}
    for dataset in datasets:
        if dataset in done:
            log(f"{dataset}: already in {out}, skipped (delete its runs to measure again)")
            continue
        samples = load_dataset(dataset, limit)
        log(f"{dataset}: {len(samples)} samples x {len(decoders)} methods ({', '.join(decoders)})")
        result = run_bench(target, decoders, samples, config, dataset)
        result["path"] = verify_pick.path
        fastest_tps = result["methods"].get(FASTEST_AR, result["methods"]["ar"])["tokens_per_s"]
        state["runs"] += _records(result, config_of, fastest_tps)
        _write(out, state)
        log(f"{dataset}: written to {out}")
    return state

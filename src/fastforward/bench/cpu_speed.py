"""The CPU speed study (``fastforward cpu-speed``): cost curves, then methods side by side, flat records.

One process, one run: (1) the k-token forward cost curve of the model per (dtype, kernel path); (2) the
configuration with the cheapest 1-token forward is "the fastest AR we build", the one with the cheapest
8-token forward runs the parallel methods; (3) per dataset, ``run_bench`` on the parallel configuration
with AR in that same configuration as the baseline, plus AR in the fastest configuration as a second
baseline. Results go to one JSON file (schema of issue 13, ``runs`` / ``cost_curves``), rewritten after
every dataset; a dataset already in the file is skipped (resume after an interruption).

Drafts are loaded in the fastest-AR configuration (drafting is one token at a time, so it wants the cheapest
1-token forward): ``draft`` (same tokenizer as the target: sd, hf_assisted, ...) and ``cross_draft`` (any
tokenizer, for ``sd-cross`` only), so one study can hold the 0.5B same-family draft and the 135M
cross-tokenizer one.

Exactness is claimed in fp32: when the parallel configuration is not fp32, a last stage per dataset runs
every lossless method and AR on the first ``exact_samples`` prompts in float32 (``exact_tokens`` new tokens
each, timing ignored) and records the fraction identical to fp32 AR as ``identical_to_ar_fp32``.

Every finished turn is saved in a sample log per dataset beside ``out`` (as ``bench`` does); running the same
command again resumes the dataset in flight, on the same machine only (the CPU is part of the log's identity,
since timings from two machines must not mix in one ratio).
"""

from __future__ import annotations

import dataclasses
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
from fastforward.bench.samplelog import SampleLog
from fastforward.core.decoder import GenerationConfig
from fastforward.data import load_dataset
from fastforward.decoders.ar import ARDecoder
from fastforward.decoders.registry import build_decoders, option_names
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
BASELINE = "ar"
CROSS = "sd-cross"


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


def _split_methods(methods: str) -> tuple[str, str]:
    """(methods built with the same-tokenizer draft, methods built with the cross-tokenizer draft)."""
    names = [m.strip() for m in methods.split(",") if m.strip()]
    cross = [m for m in names if m.split(":")[0] == CROSS]
    return ",".join(m for m in names if m not in cross), ",".join([BASELINE, *cross]) if cross else ""


def _build(methods: str, target, draft, cross_draft, options: dict[str, Any]) -> dict[str, Any]:
    """Every decoder of the study; sd-cross gets ``cross_draft``, the others ``draft``."""
    same, cross = _split_methods(methods)
    cross_labels = set(cross.split(",")) - {BASELINE}

    def scoped_to_cross(key: str) -> bool:
        return "." in key and key.split(".", 1)[0] in cross_labels

    decoders = build_decoders(
        same, target, draft, {k: v for k, v in options.items() if not scoped_to_cross(k)}
    )
    if cross:
        if cross_draft is None:
            raise FastForwardError("sd-cross needs --cross-draft (a draft model of another tokenizer)")
        readable = option_names(CROSS)
        own = {k: v for k, v in options.items() if scoped_to_cross(k) or ("." not in k and k in readable)}
        extra = build_decoders(cross, target, cross_draft, own)
        decoders.update((k, v) for k, v in extra.items() if k != BASELINE)
    return decoders


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
    cross_draft: str | None = None,
    exact_samples: int = 10,
    exact_tokens: int = 32,
) -> dict[str, Any]:
    state: dict[str, Any] = json.loads(out.read_text()) if out.exists() else {}
    if state and state.get("model") != model:
        raise FastForwardError(
            f"{out} holds a study of {state.get('model')}, not {model}; choose another --out"
        )
    state.update(model=model, hardware=hardware.describe(), **hardware.provenance(), command=" ".join(sys.argv), draft=draft,
                 cross_draft=cross_draft, exact_check={"samples": exact_samples, "max_new_tokens": exact_tokens})  # fmt: skip
    state.setdefault("runs", [])
    if state["command"] not in state.setdefault("commands", []):
        state["commands"].append(state["command"])  # a study may be built by several (resumed) commands

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

    done = {r["dataset"] for r in state["runs"]}
    todo = [d for d in datasets if d not in done]
    if todo:
        _bench(state, out, model, todo, methods, limit, max_new_tokens, options, ar_pick, verify_pick,
               draft, cross_draft)  # fmt: skip
    if verify_pick.dtype != "float32" and exact_samples > 0:
        fp32_path = choose([c for c in curves if c["dtype"] == "float32"] or curves, verify_k).path
        _exact(state, out, model, datasets, methods, limit, options, ar_pick, draft, cross_draft,
               exact_samples, exact_tokens, fp32_path)  # fmt: skip
    return state


def _bench(state, out, model, datasets, methods, limit, max_new_tokens, options, ar_pick, verify_pick,
           draft, cross_draft) -> None:  # fmt: skip
    """Every method on each dataset in the parallel configuration, one dataset at a time, resumable."""
    target = load_model(model, verify_pick.dtype, path=verify_pick.path)
    draft_model = load_model(draft, ar_pick.dtype, path=ar_pick.path) if draft else None
    cross_model = load_model(cross_draft, ar_pick.dtype, path=ar_pick.path) if cross_draft else None
    decoders = _build(methods, target, draft_model, cross_model, options)
    config_of: dict[str, tuple[str, str]] = {}  # (dtype, path) of decoders not on the parallel configuration
    if (ar_pick.dtype, ar_pick.path) != (verify_pick.dtype, verify_pick.path):
        fastest = load_model(model, ar_pick.dtype, path=ar_pick.path)
        decoders[FASTEST_AR] = ARDecoder(fastest.model)
        config_of[FASTEST_AR] = (ar_pick.dtype, ar_pick.path)
    config = GenerationConfig(max_new_tokens=max_new_tokens, eos_token_ids=target.eos_token_ids)
    for dataset in datasets:
        samples = load_dataset(dataset, limit)
        log(f"{dataset}: {len(samples)} samples x {len(decoders)} methods ({', '.join(decoders)})")
        ident = {"model": model, "dataset": dataset, "methods": list(decoders), "options": options,
                 "max_new_tokens": max_new_tokens, "samples": [s.id for s in samples], "draft": draft,
                 "cross_draft": cross_draft, "verify": [verify_pick.dtype, verify_pick.path],
                 "ar": [ar_pick.dtype, ar_pick.path], "hardware": hardware.describe()}  # fmt: skip
        sample_log = SampleLog.open(out.with_name(f"{out.stem}.{dataset}.samples.jsonl"), ident, resume=True)
        try:
            result = run_bench(target, decoders, samples, config, dataset,
                               saved=sample_log.done, on_turn=sample_log.append)  # fmt: skip
        finally:
            sample_log.close()
        result["path"] = verify_pick.path
        fastest_tps = result["methods"].get(FASTEST_AR, result["methods"]["ar"])["tokens_per_s"]
        state["runs"] += _records(result, config_of, fastest_tps)
        _write(out, state)
        sample_log.close(remove=True)
        log(f"{dataset}: written to {out}")
    del target, draft_model, cross_model, decoders
    gc.collect()


def _exact(state, out, model, datasets, methods, limit, options, ar_pick, draft, cross_draft, exact_samples,
           exact_tokens, fp32_path) -> None:  # fmt: skip
    """After the timed runs (their models freed: an fp32 copy of a 1.5B model beside them does not fit in
    24 GiB): fill ``identical_to_ar_fp32`` of each dataset's lossless records not yet checked."""
    checked = state.setdefault("exact_checked", [])
    todo = [d for d in datasets if d not in checked and any(r["dataset"] == d for r in state["runs"])]
    if not todo:
        return
    draft_model = load_model(draft, ar_pick.dtype, path=ar_pick.path) if draft else None
    cross_model = load_model(cross_draft, ar_pick.dtype, path=ar_pick.path) if cross_draft else None
    target = load_model(model, "float32", path=fp32_path)
    decoders = _build(methods, target, draft_model, cross_model, options)
    decoders = {n: d for n, d in decoders.items() if d.lossless or n == BASELINE}
    config = GenerationConfig(max_new_tokens=exact_tokens, eos_token_ids=target.eos_token_ids)
    for dataset in todo:
        log(f"{dataset}: fp32 exactness check, {exact_samples} prompts x {exact_tokens} tokens ({fp32_path})")
        samples = [
            dataclasses.replace(s, turns=s.turns[:1]) for s in load_dataset(dataset, limit)[:exact_samples]
        ]
        result = run_bench(target, decoders, samples, config, dataset, warmup=0)
        same = {n: m["identical_to_ar"] for n, m in result["methods"].items()}
        for r in state["runs"]:
            if r["dataset"] != dataset:
                continue
            if r["label"] == FASTEST_AR:
                r["identical_to_ar_fp32"] = 1.0  # the reference itself
            elif r["lossless"] and r["label"] in same:
                r["identical_to_ar_fp32"] = round(same[r["label"]], 3)
        checked.append(dataset)
        _write(out, state)

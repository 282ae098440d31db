"""results/training_free.json: the training-free drafters side by side, from the bench files that measured them.

Input: ``fastforward bench --out X.json`` files, one per dataset (each holds AR and the methods of one run, so
every speedup is against the AR of the same process). Output: ``records``, one per (file, method) with exactly
the keys issue "training-free drafters" names (model, dtype, engine, method, dataset, tokens_per_forward,
speedup_vs_ar, identical_to_ar_fp32, isa), and ``details`` beside them with what a record also needs to be
read honestly (tokens/s, the share of plain AR steps, samples, the code revision, the reproducing command).
Nothing here times anything.

``python -m fastforward.bench.training_free --bench a.json b.json ... --out results/training_free.json``
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def records(bench: dict[str, Any]) -> list[dict[str, Any]]:
    """One record per method of a bench file; ``identical_to_ar_fp32`` only where the run was fp32."""
    engine = bench.get("engine", "eager")
    return [
        {
            "model": bench["model"],
            "dtype": bench["dtype"],
            "engine": "eager" if name.startswith("hf_") else engine,
            "method": name,
            "dataset": bench["dataset"],
            "tokens_per_forward": round(m["new_tokens"] / m["target_forwards"], 3)
            if m["target_forwards"]
            else None,
            "speedup_vs_ar": round(m["speedup_vs_ar"], 3),
            "identical_to_ar_fp32": m["identical_to_ar"] if bench["dtype"] == "float32" else None,
            "isa": bench.get("isa"),
        }
        for name, m in bench["methods"].items()
    ]


def details(bench: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "method": name,
            "dataset": bench["dataset"],
            "tokens_per_s": round(m["tokens_per_s"], 2),
            "ar_step_share": m.get("ar_step_share"),
            "mean_width": m.get("mean_width"),
            "samples": m.get("samples"),
            "hardware": bench.get("hardware"),
            "revision": bench.get("revision"),
            "command": bench.get("command"),
        }
        for name, m in bench["methods"].items()
    ]


def table(benches: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "records": [r for b in benches for r in records(b)],
        "details": [d for b in benches for d in details(b)],
    }


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m fastforward.bench.training_free")
    p.add_argument("--bench", nargs="+", required=True, help="fastforward bench JSON files")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    benches = [json.loads(Path(f).read_text()) for f in args.bench]
    Path(args.out).write_text(json.dumps(table(benches), indent=1) + "\n")
    print(f"wrote {args.out}: {sum(len(b['methods']) for b in benches)} records")


if __name__ == "__main__":
    main()

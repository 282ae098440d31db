"""Print the tables of docs/results.md's session-49 section from this folder's bench files (no timing).

Run: python results/compiled_s49/summary.py
"""

import json
from pathlib import Path

HERE = Path(__file__).parent
METHODS = ["jacobi", "lookahead", "suffix", "recycle", "pld", "layerskip", "qsd"]
RUNS = ["", "_r2", "_r3"]  # three runs of the same command, one after another
DATASETS = ["mtbench", "gsm8k", "humaneval"]


def cell(m: dict) -> str:
    iv = m.get("speedup_interval_90")
    return f"{m['speedup_vs_ar']:.2f}x" + (f" ({iv[0]:.2f}-{iv[1]:.2f})" if iv else "")


def load(ds: str, run: str) -> dict | None:
    path = HERE / f"bench_{ds}_epyc_bf16_8p{run}.json"
    return json.loads(path.read_text())["methods"] if path.exists() else None


print("| run | dataset | AR tok/s | llama.cpp BF16 | AR / llama.cpp | best lossless: x AR, tok/s | jacobi | lookahead |")
print("|---|---|---:|---:|---:|---|---|---|")
for run in RUNS:
    for ds in DATASETS:
        ms = load(ds, run)
        if ms is None:
            continue
        ar, ll = ms["ar"]["tokens_per_s"], ms["llamacpp"]["tokens_per_s"]
        best = max(METHODS, key=lambda k: ms[k]["tokens_per_s"])
        ratio = f"{ar / ll:.3f}"
        ratio = f"**{ratio}**" if ar / ll >= 0.8 else ratio
        print(
            f"| `epyc_bf16_8p{run}` | {ds} | {ar:.1f} | {ll:.1f} | {ratio} | {best} {cell(ms[best])}, "
            f"{ms[best]['tokens_per_s']:.1f} | {cell(ms['jacobi'])} | {cell(ms['lookahead'])} |"
        )
print()
print("Every method, first run (speedup over compiled AR, 90% interval; share of its steps that ran as plain AR):")
print()
print("| dataset | " + " | ".join(METHODS) + " |")
print("|---|" + "---:|" * len(METHODS))
for ds in DATASETS:
    ms = load(ds, "")
    row = [f"{cell(ms[k])}, {ms[k]['ar_step_share'] * 100:.0f}% AR" for k in METHODS]
    print(f"| {ds} | " + " | ".join(row) + " |")

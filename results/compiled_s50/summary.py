"""Print the tables of docs/results.md's session-50 section from this folder's bench files and session 49's
(no timing). Run: python results/compiled_s50/summary.py"""

import json
from pathlib import Path

HERE = Path(__file__).parent
S49 = HERE.parent / "compiled_s49"
METHODS = ["jacobi", "lookahead", "suffix", "recycle", "pld", "layerskip", "qsd"]
DATASETS = ["mtbench", "gsm8k", "humaneval"]


def cell(m: dict) -> str:
    iv = m.get("speedup_interval_90")
    return f"{m['speedup_vs_ar']:.2f}x" + (f" ({iv[0]:.2f}-{iv[1]:.2f})" if iv else "")


def load(folder: Path, name: str) -> dict | None:
    path = folder / name
    return json.loads(path.read_text())["methods"] if path.exists() else None


RUNS = [(S49, f"_epyc_bf16_8p{r}", f"s49 {r[1:] or 'r1'} (matmuls)") for r in ("", "_r2", "_r3")]
RUNS += [(HERE, "_epyc_bf16_8p", "s50 r1 (summed, reverted)"), (HERE, "_epyc_bf16_8p_final", "s50 final (matmuls)")]
print("| run | dataset | AR tok/s | ms per AR token | llama.cpp BF16 | AR / llama.cpp | best lossless: x AR, tok/s | jacobi | lookahead |")
print("|---|---|---:|---:|---:|---:|---|---|---|")
for ds in DATASETS:
    for folder, suffix, label in RUNS:
        ms = load(folder, f"bench_{ds}{suffix}.json")
        if ms is None:
            continue
        ar, ll = ms["ar"]["tokens_per_s"], ms["llamacpp"]["tokens_per_s"]
        best = max(METHODS, key=lambda k: ms[k]["tokens_per_s"])
        ratio = f"{ar / ll:.3f}"
        ratio = f"**{ratio}**" if ar / ll >= 1.0 else ratio
        print(
            f"| {label} | {ds} | {ar:.1f} | {1000 / ar:.2f} | {ll:.1f} | {ratio} | {best} {cell(ms[best])}, "
            f"{ms[best]['tokens_per_s']:.1f} | {cell(ms['jacobi'])} | {cell(ms['lookahead'])} |"
        )
print()
for tag, title in (("", "session 50 first run, summed attention (reverted)"), ("_final", "session 50 final code")):
    print()
    print(f"Every method, {title} (speedup over compiled AR, 90% interval; share of its steps that ran as plain AR; tok/s):")
    print()
    print("| dataset | " + " | ".join(METHODS) + " |")
    print("|---|" + "---:|" * len(METHODS))
    for ds in DATASETS:
        ms = load(HERE, f"bench_{ds}_epyc_bf16_8p{tag}.json")
        if ms is None:
            continue
        row = [f"{cell(ms[k])}, {ms[k]['ar_step_share'] * 100:.0f}% AR, {ms[k]['tokens_per_s']:.1f}" for k in METHODS]
        print(f"| {ds} | " + " | ".join(row) + " |")

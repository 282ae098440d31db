"""Print the tables of docs/results.md's session-49 section from this folder's bench files (no timing).

Run: python results/compiled_s49/summary.py
"""

import json
from pathlib import Path

HERE = Path(__file__).parent
METHODS = ["jacobi", "lookahead", "suffix", "recycle", "pld", "layerskip", "qsd"]


def cell(m: dict) -> str:
    iv = m.get("speedup_interval_90")
    return f"{m['speedup_vs_ar']:.2f}x" + (f" ({iv[0]:.2f}-{iv[1]:.2f})" if iv else "")


print("| dataset | AR tok/s | llama.cpp BF16 tok/s | AR / llama.cpp | " + " | ".join(METHODS) + " |")
print("|---|---:|---:|---:|" + "---:|" * len(METHODS))
for ds in ["mtbench", "gsm8k", "humaneval"]:
    d = json.loads((HERE / f"bench_{ds}_epyc_bf16_8p.json").read_text())
    ms = d["methods"]
    ar, ll = ms["ar"]["tokens_per_s"], ms["llamacpp"]["tokens_per_s"]
    row = [ds, f"{ar:.1f}", f"{ll:.1f}", f"{ar / ll:.2f}"] + [cell(ms[k]) for k in METHODS]
    print("| " + " | ".join(row) + " |")
print()
print("| dataset | best lossless | tok/s | above llama.cpp AR | AR-step share of jacobi / lookahead |")
print("|---|---|---:|:--:|---:|")
for ds in ["mtbench", "gsm8k", "humaneval"]:
    d = json.loads((HERE / f"bench_{ds}_epyc_bf16_8p.json").read_text())
    ms = d["methods"]
    best = max(METHODS, key=lambda k: ms[k]["tokens_per_s"])
    b = ms[best]
    above = "yes" if b["tokens_per_s"] > ms["llamacpp"]["tokens_per_s"] else "no"
    share = f"{ms['jacobi']['ar_step_share'] * 100:.0f}% / {ms['lookahead']['ar_step_share'] * 100:.0f}%"
    print(f"| {ds} | {best} {cell(b)} | {b['tokens_per_s']:.1f} | {above} | {share} |")

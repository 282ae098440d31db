"""The SmolLM2 float32 table of docs/results.md (session 59) from the three bench files: per method and dataset
tok/s, speedup vs compiled AR with its 90% interval, and the share of its tokens from plain AR steps; then
each file's noise floor. Run from the repository root: python results/compiled_s59/summary.py"""

import json
from pathlib import Path

OUT = Path(__file__).parent
DATASETS = ("mtbench", "gsm8k", "humaneval")
files = {ds: json.loads((OUT / f"bench_{ds}_87b879d.json").read_text()) for ds in DATASETS}
methods = list(files["gsm8k"]["methods"])
print("| method | " + " | ".join(DATASETS) + " |")
print("|---|" + "---|" * len(DATASETS))
for n in methods:
    cells = []
    for ds in DATASETS:
        m = files[ds]["methods"][n]
        lo_hi = m.get("speedup_interval_90")
        iv = f"; {lo_hi[0]:.2f}-{lo_hi[1]:.2f}" if lo_hi else ""
        share = m["ar_steps"] / m["new_tokens"] if n not in ("ar", "ar:twin", "llamacpp") else None
        cells.append(
            f"{m['tokens_per_s']:.1f} ({m['speedup_vs_ar']:.2f}x{iv}"
            + (f"; {share:.0%} AR tokens" if share is not None else "") + ")"
        )
    print(f"| {n} | " + " | ".join(cells) + " |")
for ds in DATASETS:
    f = files[ds]["noise_floor"]
    print(f"{ds}: noise floor {f['speedup']:.3f}x, band {f['band']}, inside: {', '.join(f['within']) or 'none'}")

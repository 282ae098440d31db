"""The tables of docs/results.md for session 60 from its bench files: per method and dataset tok/s, speedup vs
compiled AR with its 90% interval and the share of its tokens from plain AR steps; then each file's noise floor.
Run from the repository root: python results/compiled_s60/summary.py [PREFIX] (default cap_bench: the SmolLM2
float32 runs under the AVX2 cap; qwen15_bf16_gsm8k8: the 1.5B pair, no cap)."""

import json
import sys
from pathlib import Path

OUT = Path(__file__).parent
prefix = sys.argv[1] if len(sys.argv) > 1 else "cap_bench"
files = {
    p.stem.removeprefix(prefix + "_").split("_")[0] or p.stem: json.loads(p.read_text())
    for p in sorted(OUT.glob(f"{prefix}*.json"))
}
names = list(files)
print("| method | " + " | ".join(names) + " |")
print("|---|" + "---|" * len(names))
for n in next(iter(files.values()))["methods"]:
    cells = []
    for ds in names:
        m = files[ds]["methods"].get(n)
        if m is None:
            cells.append("-")
            continue
        lo_hi = m.get("speedup_interval_90")
        iv = f"; {lo_hi[0]:.2f}-{lo_hi[1]:.2f}" if lo_hi else ""
        share = (
            m["ar_steps"] / m["new_tokens"]
            if m.get("ar_steps") is not None and n not in ("ar", "ar:twin", "llamacpp")
            else None
        )
        cells.append(
            f"{m['tokens_per_s']:.1f} ({m['speedup_vs_ar']:.2f}x{iv}"
            + (f"; {share:.0%} AR tokens" if share else "")
            + f"; {m['mean_accepted_tokens']:.2f} tok/fwd; same {m['identical_to_ar']})"
        )
    print(f"| {n} | " + " | ".join(cells) + " |")
for ds in names:
    f = files[ds].get("noise_floor")
    if f:
        print(
            f"{ds}: noise floor {f['speedup']:.3f}x, band {f['band']}, inside: {', '.join(f['within']) or 'none'}"
        )

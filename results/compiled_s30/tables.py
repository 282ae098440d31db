"""The markdown tables of docs/results.md's session-30 section, printed from this folder's files.

    python results/compiled_s30/tables.py
"""

import json
from pathlib import Path

HERE = Path(__file__).parent
SHOW = ("ar", "ar_eager", "hf_generate", "suffix", "recycle", "pld", "lookahead", "jacobi", "layerskip", "qsd")
LABEL = {"ar": "ar (compiled)", "ar_eager": "ar_eager (eager, default path)", "llamacpp": "llama.cpp, same prompts"}


def cell(m: dict, name: str) -> str:
    share = m.get("ar_step_share")
    plain = name in ("ar", "ar_eager", "hf_generate", "llamacpp") or share is None
    same = "-" if name == "llamacpp" else f"{m['identical_to_ar']:.0%}"
    return f"{m['tokens_per_s']:.1f}, {m['speedup_vs_ar']:.2f}x, {'-' if plain else f'{share:.2f}'}, {same}"


def table(files: dict[str, str], here: Path = HERE) -> str:
    """One row per method, one column group per file (names relative to ``here``): tok/s, vs compiled AR,
    AR-step share, same as AR."""
    runs = {label: json.loads((here / f).read_text()) for label, f in files.items()}
    names = [n for n in (*SHOW, "llamacpp") if any(n in r["methods"] for r in runs.values())]
    lines = ["| method | " + " | ".join(f"{k}: tok/s, vs compiled AR, AR-step share, same as AR" for k in runs) + " |",
             "|---|" + "---|" * len(runs)]
    for n in names:
        cells = [cell(r["methods"][n], n) if n in r["methods"] else "-" for r in runs.values()]
        lines.append(f"| {LABEL.get(n, n)} | " + " | ".join(cells) + " |")
    first = next(iter(runs.values()))
    lines += ["", f"Hardware: {first['hardware']}; revision {first['revision']}."]
    return "\n".join(lines)


if __name__ == "__main__":
    print(table({ds: f"bench_{ds}_avx512.json" for ds in ("mtbench", "gsm8k", "humaneval")}), "\n")
    print(table({ds: f"bench_{ds}_avx2cap.json" for ds in ("mtbench", "gsm8k", "humaneval")}), "\n")
    print(table({"humaneval, 8 prompts": "bench_humaneval8_avx512.json"}), "\n")
    print(table({"bf16 (vs BF16)": "precision_bf16.json", "int8 weights, bf16 activations (vs Q8_0)": "precision_int8.json"}))

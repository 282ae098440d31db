"""The markdown tables of docs/results.md's session-33 section (the AMX Xeon), printed from this folder's files
(session 32's layout: tok/s, speedup vs compiled AR, share of plain AR steps, same tokens as AR).

    python results/compiled_s33/tables.py
"""

import json
import sys
from pathlib import Path

HERE = Path(__file__).parent
SHOW = ("ar", "ar_eager", "hf_generate", "suffix", "recycle", "pld", "sd", "lookahead", "jacobi", "layerskip", "qsd")
REFERENCE = ("llamacpp", "llamacpp_sd")
LABEL = {
    "ar": "ar (compiled)",
    "ar_eager": "ar_eager (eager, default path)",
    "llamacpp": "llama.cpp AR, same prompts",
    "llamacpp_sd": "llama.cpp speculative (0.5B draft), same prompts",
}


def cell(m: dict, name: str) -> str:
    share = m.get("ar_step_share")
    plain = name in ("ar", "ar_eager", "hf_generate", *REFERENCE) or share is None
    same = "-" if name in REFERENCE else f"{m['identical_to_ar']:.0%}"
    return f"{m['tokens_per_s']:.1f}, {m['speedup_vs_ar']:.2f}x, {'-' if plain else f'{share:.2f}'}, {same}"


def table(files: dict[str, str]) -> str:
    """One row per method, one column per file: tok/s, vs compiled AR, AR-step share, same as AR."""
    runs = {label: json.loads((HERE / f).read_text()) for label, f in files.items() if (HERE / f).exists()}
    if not runs:
        return ""
    names = [n for n in (*SHOW, *REFERENCE) if any(n in r["methods"] for r in runs.values())]
    lines = ["| method | " + " | ".join(runs) + " |", "|---|" + "---|" * len(runs)]
    for n in names:
        cells = [cell(r["methods"][n], n) if n in r["methods"] else "-" for r in runs.values()]
        lines.append(f"| {LABEL.get(n, n)} | " + " | ".join(cells) + " |")
    first = next(iter(runs.values()))
    revs = ", ".join(sorted({r["revision"] for r in runs.values()}))
    lines += ["", f"Hardware: {first['hardware']}; revision {revs}."]
    return "\n".join(lines)


if __name__ == "__main__":
    tags = sys.argv[1:] or ["amx_fp32_before", "amx_fp32", "amx_bf16"]
    for tag in tags:
        print(f"### {tag}\n")
        print(table({ds: f"bench_{ds}_{tag}.json" for ds in ("mtbench", "gsm8k", "humaneval")}), "\n")

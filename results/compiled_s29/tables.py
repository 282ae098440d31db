"""The markdown tables of docs/results.md's session-29 section, printed from this folder's files.

    python results/compiled_s29/tables.py
"""

import json
from pathlib import Path

HERE = Path(__file__).parent
SHOW = ("ar", "ar_eager", "hf_generate", "suffix", "pld", "recycle", "lookahead", "jacobi", "layerskip", "qsd")


def bench_table(tag: str) -> str:
    """One row per method, one column group per dataset: tok/s, vs compiled AR, AR-step share."""
    files = {ds: HERE / f"bench_{ds}_{tag}.json" for ds in ("mtbench", "gsm8k", "humaneval")}
    runs = {ds: json.loads(p.read_text()) for ds, p in files.items() if p.exists()}
    if not runs:
        return f"(no bench files for {tag})"
    head = "| method | " + " | ".join(f"{ds}: tok/s, vs compiled AR, AR-step share, same as AR" for ds in runs)
    lines = [head + " |", "|---|" + "---|" * len(runs)]
    for name in (*SHOW, "llamacpp"):
        cells = []
        for r in runs.values():
            m = r["methods"].get(name)
            if m is None:
                cells.append("-")
                continue
            share = m.get("ar_step_share")
            same = "-" if name == "llamacpp" else f"{m['identical_to_ar']:.0%}"
            share_s = "-" if name in ("ar", "ar_eager", "hf_generate", "llamacpp") or share is None else f"{share:.2f}"
            cells.append(f"{m['tokens_per_s']:.1f}, {m['speedup_vs_ar']:.2f}x, {share_s}, {same}")
        label = {"ar": "ar (compiled)", "ar_eager": "ar_eager (eager, default path)", "hf_generate": "hf_generate",
                 "llamacpp": "llama.cpp F32, same prompts"}.get(name, name)
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    first = next(iter(runs.values()))
    lines.append("")
    lines.append(f"Hardware: {first['hardware']}; revision {first['revision']}.")
    return "\n".join(lines)


def curve_table(tag: str) -> str:
    c = json.loads((HERE / f"curves_{tag}.json").read_text())["cost_curves"]
    llama = {}
    p = HERE / f"llamacpp_{tag}.jsonl"
    if p.exists():
        for line in p.read_text().splitlines():
            r = json.loads(line)
            if "F32" in r["model_filename"] and r["n_prompt"] > 0:
                llama[str(r["n_prompt"])] = r["avg_ns"] / 1e6
    lines = ["| k fed tokens | eager fp32 prepacked (ms) | compiled fp32 (ms) | llama.cpp F32 pp k (ms) |",
             "|---:|---:|---:|---:|"]
    for k in c["compiled"]:
        ll = f"{llama[k]:.1f}" if k in llama else "-"
        lines.append(f"| {k} | {c['eager'][k]:.1f} | {c['compiled'][k]:.1f} | {ll} |")
    return "\n".join(lines)


if __name__ == "__main__":
    for tag in ("avx512", "avx2cap"):
        print(f"## {tag}\n")
        print(bench_table(tag), "\n")
        if (HERE / f"curves_{tag}.json").exists():
            print(curve_table(tag), "\n")

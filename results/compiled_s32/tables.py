"""The markdown tables of docs/results.md's session-32 section, printed from this folder's files (session 30's
layout, with the draft-model rows and llama.cpp's speculative row added).

    python results/compiled_s32/tables.py
"""

import json
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
    runs = {label: json.loads((HERE / f).read_text()) for label, f in files.items()}
    names = [n for n in (*SHOW, *REFERENCE) if any(n in r["methods"] for r in runs.values())]
    lines = ["| method | " + " | ".join(runs) + " |", "|---|" + "---|" * len(runs)]
    for n in names:
        cells = [cell(r["methods"][n], n) if n in r["methods"] else "-" for r in runs.values()]
        lines.append(f"| {LABEL.get(n, n)} | " + " | ".join(cells) + " |")
    first = next(iter(runs.values()))
    lines += ["", f"Hardware: {first['hardware']}; revision {', '.join(sorted({r['revision'] for r in runs.values()}))}."]
    return "\n".join(lines)


if __name__ == "__main__":
    qwen = {f"{ds}{tag}": f"qwen15_int8_{ds}_avx512{tag}.json" for tag in ("_eagerdraft", "") for ds in ("humaneval", "gsm8k")}
    print(table({k.replace("_eagerdraft", " (eager draft)"): v for k, v in qwen.items()}), "\n")
    smol = {ds: f"bench_{ds}_avx512.json" for ds in ("mtbench", "gsm8k", "humaneval")}
    if all((HERE / f).exists() for f in smol.values()):
        print(table(smol))

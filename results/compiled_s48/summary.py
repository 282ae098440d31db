"""The tables of docs/results.md's session-48 section, printed from this folder's bench files.

Run from the repository root: .venv/bin/python results/compiled_s48/summary.py
"""

import json
from pathlib import Path

HERE = Path(__file__).parent
RUNS = [  # (tag, code, what changed)
    ("huge", "85edfaf", "huge pages on"),
    ("nohuge", "85edfaf", "FASTFORWARD_HUGE_PAGES=0"),
    ("huge2", "85edfaf", "huge pages on, again"),
    ("shuffled", "d70342b", "+ a permutation per turn"),
    ("budget", "ab42739", "+ gate budget 0.5%"),
]
DATASETS = ("mtbench", "gsm8k", "humaneval")


def load(tag: str, ds: str) -> dict:
    return json.loads((HERE / f"bench_{ds}_epyc_bf16_8p_{tag}.json").read_text())


def interval(m: dict) -> str:
    lo, hi = m["speedup_interval_90"]
    return f"{m['speedup_vs_ar']:.2f}x ({lo:.2f}-{hi:.2f})"


def main() -> None:
    print(
        "| run | code | dataset | AR tok/s | llama.cpp BF16 | AR / llama.cpp | best lossless: x AR, tok/s | jacobi (90% interval) | lookahead |"
    )
    print("|---|---|---|---:|---:|---:|---|---|---|")
    for tag, code, what in RUNS:
        for ds in DATASETS:
            r = load(tag, ds)
            m = r["methods"]
            ar, ll = m["ar"]["tokens_per_s"], m["llamacpp"]["tokens_per_s"]
            best = max((k for k in m if k not in ("ar", "llamacpp")), key=lambda k: m[k]["tokens_per_s"])
            b = m[best]
            mark = "**" if ar / ll >= 0.8 else ""
            print(
                f"| `{tag}` ({what}) | {code} | {ds} | {ar:.1f} | {ll:.1f} | {mark}{ar / ll:.3f}{mark} "
                f"| {best} {b['speedup_vs_ar']:.2f}x, {b['tokens_per_s']:.1f} | {interval(m['jacobi'])} "
                f"| {interval(m['lookahead'])} |"
            )


def qwen() -> None:
    """The int8 1.5B pair's table."""
    print(
        "| run | code | dataset | AR tok/s | llama.cpp Q8_0 AR / its speculative | AR / llama.cpp | pld | suffix | sd | on 2 MB pages |"
    )
    print("|---|---|---|---:|---:|---:|---|---|---|---:|")
    for tag in ("epyc", "epyc_huge"):
        for ds in ("humaneval", "gsm8k"):
            r = json.loads((HERE / f"qwen15_int8_{ds}_{tag}.json").read_text())
            m = r["methods"]
            ar, ll, lsd = (
                m["ar"]["tokens_per_s"],
                m["llamacpp"]["tokens_per_s"],
                m["llamacpp_sd"]["tokens_per_s"],
            )
            cells = " | ".join(
                f"{interval(m[k])}, {m[k]['tokens_per_s']:.1f}" for k in ("pld", "suffix", "sd")
            )
            print(
                f"| `{tag}` | {r['revision'][:7]} | {ds} | {ar:.1f} | {ll:.1f} / {lsd:.1f} | {ar / ll:.2f}x | {cells} "
                f"| {r['huge_page_bytes'] / 1e9:.2f} GB |"
            )


if __name__ == "__main__":
    main()
    print()
    qwen()

"""Markdown tables from benchmark JSON (the same JSON the CLI writes)."""

from __future__ import annotations

from typing import Any


def _fmt(x: Any, spec: str) -> str:
    return "n/a" if x is None else format(x, spec)


def markdown_table(result: dict[str, Any]) -> str:
    lines = [
        f"**{result['model']}**, {result['dtype']}, {result['dataset']}, max_new_tokens {result['max_new_tokens']} "
        f"— {result['hardware']}",
        "",
        "| method | tokens/s | speedup vs AR | mean accepted tokens/forward | identical to AR | samples | lossless |",
        "|---|---:|---:|---:|---:|---:|:--:|",
    ]
    for name, m in result["methods"].items():
        lossless = {True: "yes", False: "**no (lossy)**", None: "-"}[m.get("lossless")]
        lines.append(
            f"| {name} | {m['tokens_per_s']:.1f} | {m['speedup_vs_ar']:.2f}x | {_fmt(m['mean_accepted_tokens'], '.2f')} "
            f"| {_fmt(m['identical_to_ar'], '.0%')} | {m['samples']} | {lossless} |"
        )
    if "ar_vs_hf_generate" in result:
        lines += ["", f"AR baseline / transformers generate(): {result['ar_vs_hf_generate']:.2f}x"]
    return "\n".join(lines)

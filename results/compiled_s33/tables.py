"""The markdown tables of docs/results.md's session-33 section (the AMX Xeon), printed from this folder's files
(session 32's layout: tok/s, speedup vs compiled AR, share of plain AR steps, same tokens as AR).

    python results/compiled_s33/tables.py
"""

import importlib.util
import json
import sys
from pathlib import Path

HERE = Path(__file__).parent
# session 32's rows, labels and cell format, reused (scripts here are files, not a package)
_spec = importlib.util.spec_from_file_location("tables_s32", HERE.parent / "compiled_s32" / "tables.py")
_s32 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_s32)
SHOW, REFERENCE, LABEL, cell = _s32.SHOW, _s32.REFERENCE, _s32.LABEL, _s32.cell


def table(files: dict[str, str]) -> str:
    """Session 32's table, skipping files not (yet) measured."""
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

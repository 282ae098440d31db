"""The markdown tables of docs/results.md's session-35 section (the AMX Xeon), printed from this folder's files
with session 33's table (session 32's layout: tok/s, speedup vs compiled AR, share of plain AR steps, same
tokens as AR).

    python results/compiled_s35/tables.py [TAG ...]   # default: amx_fp32 avx2cap
    DIR=results/compiled_s40 python results/compiled_s35/tables.py   # a later session's files, same tables
"""

import importlib.util
import os
import sys
from pathlib import Path

HERE = Path(__file__).parent
_spec = importlib.util.spec_from_file_location("tables_s33", HERE.parent / "compiled_s33" / "tables.py")
_s33 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_s33)

_s33.HERE = Path(os.environ.get("DIR", HERE))  # its table() reads the files beside it: point it at DIR

if __name__ == "__main__":
    for tag in sys.argv[1:] or ["amx_fp32", "avx2cap"]:
        print(f"### {tag}\n")
        print(_s33.table({ds: f"bench_{ds}_{tag}.json" for ds in ("mtbench", "gsm8k", "humaneval")}), "\n")

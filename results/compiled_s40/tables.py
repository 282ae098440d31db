"""The markdown tables of docs/results.md's session-40 section, printed from this folder's files with session
33's table (tok/s, speedup vs compiled AR, share of plain AR steps, same tokens as AR).

    python results/compiled_s40/tables.py [TAG ...]   # default: amx_fp32 avx2cap
"""

import importlib.util
import sys
from pathlib import Path

HERE = Path(__file__).parent
_spec = importlib.util.spec_from_file_location("tables_s33", HERE.parent / "compiled_s33" / "tables.py")
_s33 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_s33)

_s33.HERE = HERE  # its table() reads the files beside it: point it here

if __name__ == "__main__":
    for tag in sys.argv[1:] or ["amx_fp32", "avx2cap"]:
        print(f"### {tag}\n")
        print(_s33.table({ds: f"bench_{ds}_{tag}.json" for ds in ("mtbench", "gsm8k", "humaneval")}), "\n")

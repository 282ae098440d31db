"""The markdown tables of docs/results.md's session-31 section, printed from this folder's files with session
30's table layout (results/compiled_s30/tables.py).

    python results/compiled_s31/tables.py
"""

import importlib.util
from pathlib import Path

HERE = Path(__file__).parent
_spec = importlib.util.spec_from_file_location("tables_s30", HERE.parent / "compiled_s30" / "tables.py")
_s30 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_s30)


def table(files: dict[str, str]) -> str:
    return _s30.table(files, HERE)


if __name__ == "__main__":
    print(table({ds: f"bench_{ds}_avx512.json" for ds in ("mtbench", "gsm8k", "humaneval")}), "\n")
    print(table({ds: f"bench_{ds}_avx2cap.json" for ds in ("mtbench", "gsm8k", "humaneval")}), "\n")
    print(table({"bf16 (vs BF16)": "precision_bf16.json", "int8 weights, bf16 activations (vs Q8_0)": "precision_int8.json"}))

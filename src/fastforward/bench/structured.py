"""results/structured.json: every method with and without a JSON-schema constraint, from two bench files of the
same prompts (``fastforward bench --json-schema S`` and the same command without it).

Per method and mode (``constrained`` true / false): tokens per target forward, tokens/s, the speedup against
the AR of the same run (constrained AR for the constrained rows: the reference a constrained method must
beat), whether every answer equals AR's tokens (fp32), the grammar's mask time per committed token, the
share of committed tokens that came as jump-forward drafts (forced by the grammar, proposed for free), and
the share of answers that parse as JSON with the schema's required fields. ``constraint_cost`` compares the
two ARs: what masking costs a plain decode. Nothing here times anything.

``python -m fastforward.bench.structured --schema A.json --free B.json --out results/structured.json``
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def _valid(text: str, required: list[str]) -> bool:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError:
        return False
    return isinstance(obj, dict) and all(k in obj for k in required)


def records(bench: dict[str, Any]) -> list[dict[str, Any]]:
    constraint = bench.get("constraint")
    required: list[str] = []
    if constraint is not None:
        spec = constraint["spec"]
        spec = json.loads(spec) if isinstance(spec, str) else spec
        required = list(spec.get("required", []))
    out = []
    for name, m in bench["methods"].items():
        x, new = m.get("extras", {}), m["new_tokens"]
        rec: dict[str, Any] = {
            "model": bench["model"],
            "dtype": bench["dtype"],
            "isa": bench.get("isa"),
            "method": name,
            "dataset": bench["dataset"],
            "constrained": constraint is not None,
            "tokens_per_forward": round(new / m["target_forwards"], 3) if m["target_forwards"] else None,
            "tokens_per_s": round(m["tokens_per_s"], 2),
            # against the AR of the same run: constrained AR for the constrained rows
            "speedup_vs_ar_same_mode": round(m["speedup_vs_ar"], 3),
            "identical_to_ar_fp32": m["identical_to_ar"] if bench["dtype"] == "float32" else None,
            "ar_step_share": m.get("ar_step_share"),
            "new_tokens": new,
            "samples": m.get("samples"),
        }
        if constraint is not None:
            rec["speedup_vs_constrained_ar"] = rec["speedup_vs_ar_same_mode"]
            rec["mask_ms_per_token"] = round(1e3 * x.get("constraint_mask_s", 0.0) / new, 4) if new else None
            rec["masks_per_token"] = round(x.get("constraint_masks", 0) / new, 3) if new else None
            rec["jump_forward_share"] = round(x.get("jump_forward_accepted", 0) / new, 4) if new else None
            rec["jump_forward_proposed"] = x.get("jump_forward_proposed", 0)
            rec["complete_share"] = round(x.get("constraint_complete", 0) / max(m.get("samples") or 1, 1), 3)
            texts = [s.get("text", "") for s in m.get("per_sample", [])]
            rec["valid_json_share"] = (
                round(sum(_valid(t, required) for t in texts) / len(texts), 3) if texts else None
            )
        out.append(rec)
    return out


def table(schema_bench: dict[str, Any], free_bench: dict[str, Any]) -> dict[str, Any]:
    rows = records(schema_bench) + records(free_bench)
    ar_c = schema_bench["methods"]["ar"]["tokens_per_s"]
    ar_f = free_bench["methods"]["ar"]["tokens_per_s"]
    free = {r["method"]: r for r in rows if not r["constrained"]}
    for r in rows:
        if r["constrained"] and r["method"] in free:
            r["tokens_per_forward_unconstrained"] = free[r["method"]]["tokens_per_forward"]
    return {
        "records": rows,
        "constraint_cost": {
            "ar_tokens_per_s_constrained": round(ar_c, 2),
            "ar_tokens_per_s_free": round(ar_f, 2),
            # two runs (noise between them applies); the mask's own time is mask_ms_per_token
            "constrained_over_free_ar": round(ar_c / ar_f, 3) if ar_f else None,
        },
        "constraint": schema_bench.get("constraint"),
        "hardware": schema_bench.get("hardware"),
        "revision": schema_bench.get("revision"),
        "commands": [schema_bench.get("command"), free_bench.get("command")],
    }


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m fastforward.bench.structured")
    p.add_argument("--schema", required=True, help="the bench JSON run with --json-schema")
    p.add_argument("--free", required=True, help="the same bench without a constraint")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    out = table(json.loads(Path(a.schema).read_text()), json.loads(Path(a.free).read_text()))
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    for r in out["records"]:
        print(
            f"{r['method']:10s} {'schema' if r['constrained'] else 'free  '} tok/fwd {r['tokens_per_forward']}"
            f"  x{r['speedup_vs_ar_same_mode']}  mask ms/tok {r.get('mask_ms_per_token', '-')}"
            f"  jump-forward {r.get('jump_forward_share', '-')}"
        )


if __name__ == "__main__":
    main()

"""One summary of a Chimera run: head top-k accuracy per variant beside per-dataset acceptance and speed.

Inputs are files the pipeline already wrote (``train-chimera --eval-only --report`` per variant, and
``bench`` JSONs holding ``ar`` plus ``chimera`` entries); nothing is re-measured here. Per-dataset figures are
recomputed from the bench's per-sample records (every sample counted), so MT-bench and GSM8K are reported
apart even when one bench ran both. It lives in ``bench`` because it reads bench results and the decoder
registry's option labels.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fastforward.core.metrics import record_totals
from fastforward.decoders.registry import base_method, parse_options
from fastforward.errors import FastForwardError, read_user_text


def _read(path: str | Path) -> dict[str, Any]:
    try:
        return json.loads(read_user_text(path))
    except json.JSONDecodeError as e:
        raise FastForwardError(f"{path} is not JSON ({e})") from None


def dataset_of(sample: dict[str, Any]) -> str:
    """The record's ``dataset`` field; files written before it existed: the id's prefix (``gsm8k-12``)."""
    return sample.get("dataset") or sample["id"].rsplit("-", 1)[0]


def _by_dataset(samples: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for s in samples:
        groups.setdefault(dataset_of(s), []).append(s)
    return groups


def per_dataset(method: dict[str, Any], ar: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Tokens per target forward, identical_to_ar and speedup vs AR of one bench entry, split by dataset."""
    ar_groups = _by_dataset(ar["per_sample"])
    out: dict[str, dict[str, Any]] = {}
    for ds, rows in _by_dataset(method["per_sample"]).items():
        t = record_totals(rows)
        a = record_totals(ar_groups.get(ds, []))
        ar_tps = a.new_tokens / max(1e-9, a.wall_time_s)
        timed = bool(t.wall_time_s)
        out[ds] = {
            "generations": t.generations,
            "mean_accepted_tokens": _round(t.mean_accepted_tokens, 3),
            "identical_to_ar": _round(t.identical_rate, 3),
            "tokens_per_s": round(t.tokens_per_s, 2) if timed else None,
            "speedup_vs_ar": round(t.tokens_per_s / ar_tps, 3) if timed and ar_tps else None,
        }
    return out


def _round(x: float | None, digits: int) -> float | None:
    return None if x is None else round(x, digits)


def summarize(heads: list[str | Path], benches: list[str | Path]) -> dict[str, Any]:
    """{"heads": {variant: top-k table}, "bench": {dtype: {label: overall + per-dataset + cache hit rate}}}."""
    report: dict[str, Any] = {"heads": {}, "bench": {}}
    for path in heads:
        h = _read(path)
        if "head_topk" not in h:
            raise FastForwardError(f"{path} has no head_topk (not a train-chimera --report file)")
        variant = h.get("draft", {}).get("variant", Path(path).stem)
        report["heads"][variant] = {
            "head_topk": h["head_topk"],
            "positions": h.get("positions"),
            "file": str(path),
        }
    for path in benches:
        b = _read(path)
        if "methods" not in b or "ar" not in b["methods"]:
            raise FastForwardError(f"{path} is not a bench result with an 'ar' entry")
        ar = b["methods"]["ar"]
        opts = parse_options(b.get("config", {}).get("opt"))
        rows: dict[str, Any] = {}
        for label, m in b["methods"].items():
            if base_method(label) != "chimera" and label != "ar":
                continue
            ex = m.get("extras", {})
            lookups = ex.get("trigram_cache_lookups", 0)
            rows[label] = {
                "options": {k.split(".", 1)[1]: v for k, v in opts.items() if k.split(".", 1)[0] == label},
                "mean_accepted_tokens": m["mean_accepted_tokens"],
                "identical_to_ar": m["identical_to_ar"],
                "speedup_vs_ar": m["speedup_vs_ar"],
                "tokens_per_s": m["tokens_per_s"],
                "draft_time_share": m.get("draft_time_share"),
                "trigram_cache_hit_rate": round(ex.get("trigram_cache_hits", 0) / lookups, 3)
                if lookups
                else None,
                "head_accepted": ex.get("head_accepted"),
                "by_dataset": per_dataset(m, ar),
            }
        report["bench"][b["dtype"]] = {
            "file": str(path),
            "hardware": b.get("hardware"),
            "max_new_tokens": b.get("max_new_tokens"),
            "dataset": b.get("dataset"),
            "methods": rows,
        }
    return report

"""results/sampling.json for issue 19: sampled speed per method beside each method's distribution check.

Inputs are bench JSON files written by ``fastforward bench`` (each at one temperature / top-p; AR sampled
in the same run is the baseline), optionally a GSM8K bench with Chimera's exact and Consultant acceptance
(greedy, scored with ``fastforward score``). For every method found in a sampled bench, the end-to-end
distribution check of :mod:`fastforward.eval.distribution` runs at that temperature / top-p on a tiny
12-token target (the same check the CI tests assert on) and its smallest pair p-value becomes
``chi2_p_value``. Output: ``runs`` (flat records), ``consultant_tree`` (when given), ``hardware``,
``command`` and the inputs' own commands.

    python scripts/sampling_results.py --bench results/sampling_bench_t07.json results/sampling_bench_t10.json \
        --consultant results/sampling_consultant_gsm8k.json --out results/sampling.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from fastforward import hardware
from fastforward.chimera.train import new_draft
from fastforward.core.decoder import Decoder, SamplingConfig
from fastforward.decoders.chimera import ChimeraDecoder, ChimeraOptions
from fastforward.decoders.registry import build_decoder
from fastforward.eval import distribution
from fastforward.models.loading import LoadedModel

PROMPT = [1, 5, 3, 7, 1, 5, 3, 2, 1, 5, 3]  # repeats, so n-gram methods find candidates
NEW_TOKENS = 4
SAMPLES = 2000

# Each method on the tiny target, with options that make its guesses both hit and miss there.
CHECKS: dict[str, Callable[[LoadedModel], Decoder]] = {
    "pld": lambda t: build_decoder("pld", t, None, {"gamma": 3, "ngram_max": 2}),
    "lookahead": lambda t: build_decoder("lookahead", t, None, {"window": 3, "ngram": 3, "candidates": 4}),
    "jacobi": lambda t: build_decoder("jacobi", t, None, {"block_size": 4}),
    "layerskip": lambda t: build_decoder("layerskip", t, None, {"gamma": 3, "layers": 1}),
    # int8 copy of the target: q is nearly p, so nearly every draft is accepted (the bonus path is tested)
    "qsd": lambda t: build_decoder("qsd", t, None, {"gamma": 3}),
    "chimera": lambda t: ChimeraDecoder(t.model, new_draft(t.model), ChimeraOptions()),
}


def check(method: str, temperature: float, top_p: float, top_k: int) -> dict[str, Any]:
    """The distribution check of one method at one sampling configuration."""
    base = method.split(":")[0]
    if base not in CHECKS:
        return {"chi2_p_value": None, "chi2_note": f"no tiny-model check for '{base}'"}
    target = distribution.tiny_target()
    cfg = SamplingConfig(temperature=temperature, top_k=top_k, top_p=top_p)
    joint = distribution.exact_joint(target.model, cfg, PROMPT, NEW_TOKENS)
    samples, extras = distribution.sample_runs(CHECKS[base](target), cfg, PROMPT, SAMPLES, NEW_TOKENS)
    tests = distribution.pair_tests(samples, joint)
    steps = [n for e in extras for n in e["committed_per_step"][1:]]
    return {
        "chi2_p_value": min(t.p_value for t in tests),
        "chi2_pairs": [{"tokens": t.tokens, "chi2": t.statistic, "df": t.df, "p": t.p_value} for t in tests],
        "chi2_tiny_tokens_per_forward": sum(steps) / max(len(steps), 1),
    }


def runs_from(path: Path, cache: dict) -> list[dict[str, Any]]:
    bench = json.loads(path.read_text())
    s = bench["sampling"]
    out = []
    for name, m in bench["methods"].items():
        if name == "ar":
            continue
        key = (name.split(":")[0], s["temperature"], s["top_p"], s["top_k"])
        if key not in cache:
            print(f"distribution check: {key}", file=sys.stderr)
            cache[key] = check(name, s["temperature"], s["top_p"], s["top_k"])
        out.append(
            {
                "model": bench["model"],
                "dtype": bench["dtype"],
                "dataset": bench["dataset"],
                "method": name,
                "temperature": s["temperature"],
                "top_p": s["top_p"],
                "top_k": s["top_k"],
                "lossless": m["lossless"],
                "tokens_per_forward": m["mean_accepted_tokens"],
                "speedup_vs_ar": m["speedup_vs_ar"],
                "tokens_per_s": m["tokens_per_s"],
                "ar_tokens_per_s": bench["methods"]["ar"]["tokens_per_s"],
                "samples": m["samples"],
                "new_tokens": m["new_tokens"],
                **cache[key],
                "source": str(path),
            }
        )
    return out


def consultant_from(path: Path) -> dict[str, Any]:
    bench = json.loads(path.read_text())
    entries = {}
    for name, m in bench["methods"].items():
        q = (m.get("quality") or {}).get("gsm8k", {})
        entries[name] = {
            "lossless": m["lossless"],
            "tokens_per_forward": m["mean_accepted_tokens"],
            "speedup_vs_ar": m["speedup_vs_ar"],
            "identical_to_ar": m["identical_to_ar"],
            "gsm8k_correct": q.get("correct"),
            "gsm8k_n": q.get("n"),
            "gsm8k_accuracy": q.get("accuracy"),
        }
    return {"model": bench["model"], "dtype": bench["dtype"], "command": bench["command"], "entries": entries}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bench", nargs="+", type=Path, required=True, help="sampled bench JSON files")
    p.add_argument("--consultant", type=Path, help="GSM8K bench with chimera and chimera accept=consultant")
    p.add_argument("--out", type=Path, default=Path("results/sampling.json"))
    args = p.parse_args()
    torch.set_num_threads(1)  # tiny models run fastest single-threaded
    cache: dict = {}
    runs = [r for path in args.bench for r in runs_from(path, cache)]
    out: dict[str, Any] = {
        "hardware": hardware.describe(),
        "command": "python " + " ".join(sys.argv),
        "bench_commands": [json.loads(b.read_text())["command"] for b in args.bench],
        "chi2_check": (
            f"end to end through generate() on a tiny random-init Llama (12 ids, LM head x3), prompt {PROMPT}: "
            f"{SAMPLES} seeded generations of {NEW_TOKENS} tokens at the run's temperature/top-p against the "
            "exactly enumerated joint; chi2_p_value is the smallest p-value of the (x1,x2), (x2,x3), (x3,x4) "
            "pair tests (fastforward.eval.distribution)"
        ),
        "runs": runs,
    }
    if args.consultant:
        out["consultant_tree"] = consultant_from(args.consultant)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.out}: {len(runs)} runs", file=sys.stderr)


if __name__ == "__main__":
    main()

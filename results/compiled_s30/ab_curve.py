"""A/B in one process: suffix and recycle sized on the compiled staircase (this session) vs on the eager curve (before), rotating order; `python results/compiled_s30/ab_curve.py 4` (4 first turns per dataset)."""
import argparse, sys, time, json
from dataclasses import replace
from fastforward.cli.common import load_models, generation_config
from fastforward.decoders.registry import build_decoder
from fastforward.data import render_prompt, load_dataset
from fastforward.core.engine import warm_buckets
from fastforward.core.compiled import BUCKETS
from fastforward.models import costs

args = argparse.Namespace(model="smollm2-135m", dtype="float32", device="cpu", threads=2, path="auto",
    compile="on", max_new_tokens=128, methods="suffix", draft=None, fp32_logits=False, weights="full",
    temperature=0.0, top_k=0, top_p=1.0, seed=None, command="bench")
for k in ("json_schema","regex","choice","grammar","json_object"): setattr(args, k, None)
target, _ = load_models(args)
tok = target.tokenizer
n = int(sys.argv[1]) if len(sys.argv) > 1 else 4
samples = load_dataset("gsm8k", limit=n) + load_dataset("mtbench", limit=n) + load_dataset("humaneval", limit=n)
prompts = [render_prompt(tok, [{"role": "user", "content": s.turns[0]}]) for s in samples]
config = generation_config(args, target)
warm_buckets(target.model, BUCKETS, sizes=(512,))
t = time.perf_counter()
new = costs.cached_curve(target, ks=costs.KS)
print("compiled curve", [(r["k"], r["ms"]) for r in new], f"({time.perf_counter()-t:.1f} s)")
eager = json.load(open("results/compiled_s29/curves_avx512.json"))["cost_curves"]["eager"]
old = [{"k": int(k), "ms": v} for k, v in eager.items()]  # session 29's eager fp32 curve (engine_table)
print("eager curve", [(r["k"], r["ms"]) for r in old])
decs = {m: build_decoder(m, target, None, {}) for m in ("ar", "suffix", "recycle", "pld")}
for m in ("suffix", "recycle"):
    d = build_decoder(m, target, None, {})
    (setattr(d, "verify_curve", costs.interpolate(old)) if hasattr(d, "verify_curve") else None)
    decs[m + "_eagercurve"] = d
print({m: type(getattr(d, "verify_curve", None)).__name__ for m, d in decs.items()})
for m, d in decs.items():
    d.generate(prompts[0], replace(config, max_new_tokens=16)); d.reopen_estimates()
names = list(decs); tot = {m: [0, 0.0, 0, []] for m in names}; ref = {}
for i, p in enumerate(prompts):
    order = names[i % len(names):] + names[:i % len(names)]
    for m in order:
        r = decs[m].generate(p, config)
        tot[m][0] += r.stats.new_tokens; tot[m][1] += r.stats.wall_time_s; tot[m][2] += r.stats.target_forwards
        ref.setdefault(i, {})[m] = r.tokens
        h = r.stats.width_hist
        tot[m][3] = [a + b for a, b in zip(tot[m][3] + [0]*(len(h)-len(tot[m][3])), h + [0]*(len(tot[m][3])-len(h)))]
base = tot["ar"][0] / tot["ar"][1]
for m in names:
    nt, w, f, h = tot[m]
    print(f"{m:20s} {nt/w:6.1f} tok/s {nt/w/base:5.2f}x tok/fw {nt/f:.2f} ms/fw {w/f*1e3:.1f} hist {h}")
print("all identical:", all(all(v == r["ar"] for v in r.values()) for r in ref.values()))

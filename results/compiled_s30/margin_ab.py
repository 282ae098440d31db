"""A/B in one process at 0d93142 (since reverted): pld/qsd with a 5% gamma_auto margin (CostTracker.MARGIN) vs none, rotating order; `python results/compiled_s30/margin_ab.py 4` (at that commit)."""
import argparse, sys
from dataclasses import replace
from fastforward.cli.common import load_models, generation_config
from fastforward.decoders.registry import build_decoder
from fastforward.data import render_prompt, load_dataset
from fastforward.core.engine import warm_buckets
from fastforward.core.compiled import BUCKETS

args = argparse.Namespace(model="smollm2-135m", dtype="float32", device="cpu", threads=2, path="auto",
    compile="on", max_new_tokens=128, methods="pld", draft=None, fp32_logits=False, weights="full",
    temperature=0.0, top_k=0, top_p=1.0, seed=None, command="bench")
for k in ("json_schema","regex","choice","grammar","json_object"): setattr(args, k, None)
target, _ = load_models(args)
tok = target.tokenizer
n = int(sys.argv[1])
samples = load_dataset("gsm8k", limit=n) + load_dataset("humaneval", limit=n) + load_dataset("mtbench", limit=n)
prompts = [render_prompt(tok, [{"role": "user", "content": s.turns[0]}]) for s in samples]
config = generation_config(args, target)
warm_buckets(target.model, BUCKETS, sizes=(512,))
decs = {"ar": build_decoder("ar", target, None, {})}
for m in ("pld", "qsd"):
    decs[m] = build_decoder(m, target, None, {})
    d = build_decoder(m, target, None, {}); d.costs.MARGIN = 0.0; decs[m + "_nomargin"] = d
for d in decs.values():
    d.generate(prompts[0], replace(config, max_new_tokens=16)); d.reopen_estimates()
for m in ("pld_nomargin", "qsd_nomargin"):
    decs[m].costs.MARGIN = 0.0
names = list(decs); tot = {m: [0, 0.0, 0, 0] for m in names}
for i, p in enumerate(prompts):
    for m in names[i % len(names):] + names[:i % len(names)]:
        r = decs[m].generate(p, config)
        t = tot[m]; t[0] += r.stats.new_tokens; t[1] += r.stats.wall_time_s; t[2] += r.stats.target_forwards; t[3] += r.stats.parallel_steps
base = tot["ar"][0] / tot["ar"][1]
for m in names:
    nt, w, f, par = tot[m]
    print(f"{m:14s} {nt/w:6.1f} tok/s {nt/w/base:5.2f}x tok/fw {nt/f:.2f} parallel steps {par}")

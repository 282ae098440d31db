"""Probe: where layerskip's time goes when it mostly runs AR steps (HumanEval, SmolLM2 fp32 compiled)."""
import sys, time
from dataclasses import replace
from fastforward.cli import build_parser
from fastforward.cli.common import resolve_path, generation_config, load_models
from fastforward.core.options import parse_options
from fastforward.core import pacing
from fastforward.decoders.registry import build_decoders
from fastforward.data import load_dataset, render_prompt
from fastforward.bench.runner import warm_graphs, cache_sizes
from fastforward.core.compiled import compiled

argv = ["bench", "--model", "smollm2-135m", "--dataset", "humaneval", "--limit", "8", "--max-new-tokens", "128",
        "--threads", "2", "--dtype", "float32", "--path", "auto", "--compile", "on", "--methods", sys.argv[1]]
args = build_parser().parse_args(argv)
resolve_path(args)
import torch; torch.set_num_threads(2)
target, draft = load_models(args)
decs = build_decoders(args.methods, target, draft, parse_options(args.opt))
config = generation_config(args, target)
samples = load_dataset("humaneval", 8, args.split, None)
warm_graphs(target, decs, cache_sizes(target, samples, 128))
log = []
orig = pacing.CostTracker.record
def rec(self, p, a, d, v):
    log.append((p, a, d, v)); return orig(self, p, a, d, v)
pacing.CostTracker.record = rec
ids0 = render_prompt(target.tokenizer, [{"role": "user", "content": samples[0].turns[0]}])
for n, d in decs.items():
    d.generate(ids0, replace(config, max_new_tokens=16)); d.reopen_estimates()
names = list(decs)
tot = {n: 0.0 for n in names}
for rep in range(2):
  for i, s in enumerate(samples):
    ids = render_prompt(target.tokenizer, [{"role": "user", "content": s.turns[0]}])
    order = names[(i + rep) % len(names):] + names[:(i + rep) % len(names)]
    row = {}
    for n in order:
        log.clear()
        t = time.perf_counter(); r = decs[n].generate(ids, config); w = time.perf_counter() - t
        tot[n] += w
        st = r.stats
        if log:
            ar = [x for x in log if x[0] == 0]; dr = [x for x in log if x[0] > 0]
            row[n] = (f"{w:.3f}s n={len(r.tokens)} ar={len(ar)} ar_ms={sum(x[3] for x in ar):.0f} "
                      f"drafted={len(dr)} d_ms={sum(x[2] for x in dr):.0f} v_ms={sum(x[3] for x in dr):.0f} "
                      f"other_ms={w*1000-sum(x[2]+x[3] for x in log):.0f}")
        else:
            row[n] = f"{w:.3f}s n={len(r.tokens)} ms/tok={w*1000/len(r.tokens):.1f}"
    print(rep, i, " | ".join(f"{n}: {row[n]}" for n in names), flush=True)
print({n: round(v, 2) for n, v in tot.items()})

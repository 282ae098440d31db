"""Where a plain AR step of qsd/layerskip/lookahead/jacobi spends its time against AR's: per-step wall and model-call ms over the first turns of 4 HumanEval prompts (`python results/compiled_s30/ar_steps.py ar,qsd,layerskip,lookahead,jacobi`); wraps verify_step for timing only."""
import argparse, sys, time, statistics as st
from dataclasses import replace
import fastforward.core.batching as B
from fastforward.cli.common import load_models, generation_config
from fastforward.decoders.registry import build_decoder
from fastforward.data import render_prompt, load_dataset
from fastforward.core.engine import warm_buckets
from fastforward.core.compiled import BUCKETS

rec = []
orig = B.verify_step
def timed(engine, proposer, rows, pad, commit, stats=None):
    f = engine.forward
    box = {}
    def fw(*a, **k):
        t = time.perf_counter(); out = f(*a, **k); box["fw"] = (time.perf_counter() - t) * 1e3; box["w"] = max(len(b.tokens) for b in a[0]); return out
    engine.forward = fw
    t = time.perf_counter(); r = orig(engine, proposer, rows, pad, commit, stats); dt = (time.perf_counter() - t) * 1e3
    engine.forward = f
    rec.append((box.get("w", 0), dt, box.get("fw", 0)))
    return r
B.verify_step = timed
methods = sys.argv[1].split(",")
args = argparse.Namespace(model="smollm2-135m", dtype="float32", device="cpu", threads=2, path="auto",
    compile="on", max_new_tokens=128, methods=",".join(methods), draft=None, fp32_logits=False, weights="full",
    temperature=0.0, top_k=0, top_p=1.0, seed=None, command="bench")
for k in ("json_schema","regex","choice","grammar","json_object"): setattr(args, k, None)
target, _ = load_models(args)
tok = target.tokenizer
prompts = [render_prompt(tok, [{"role": "user", "content": s.turns[0]}]) for s in load_dataset("humaneval", limit=4)]
config = generation_config(args, target)
warm_buckets(target.model, BUCKETS, sizes=(512,))
decs = {m: build_decoder(m, target, None, {}) for m in methods}
for m, d in decs.items():
    d.generate(prompts[0], replace(config, max_new_tokens=16)); d.reopen_estimates()
res = {m: [] for m in methods}; walls = {m: 0.0 for m in methods}
for i, p in enumerate(prompts):
    for m in methods[i % len(methods):] + methods[:i % len(methods)]:
        rec.clear(); r = decs[m].generate(p, config); res[m] += list(rec); walls[m] += r.stats.wall_time_s
for m in methods:
    one = [(dt, fw) for w, dt, fw in res[m] if w == 1]
    print(f"{m:10s} wall {walls[m]:.2f}s steps {len(res[m])} ar-steps {len(one)} median step {st.median(d for d, _ in one):.2f} ms "
          f"median fwd {st.median(f for _, f in one):.2f} ms mean step {st.mean(d for d, _ in one):.2f} mean fwd {st.mean(f for _, f in one):.2f} "
          f"wide-step total {sum(d for w, d, _ in res[m] if w > 1)/1e3:.2f}s")

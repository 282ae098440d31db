"""Issue 32, session 51: what each step width costs inside a real run (bf16 SmolLM2, compiled), per method.
Times ModelEngine.forward by its padded bucket in a wrapper set up by this script only, and the rest of each
step (propose, accept, bookkeeping) as the generation's wall time minus prefill minus forwards."""
import argparse, collections, os, statistics as st, time
from fastforward.bench.runner import cache_sizes, settle_pages, warm_graphs
from fastforward.cli.common import load_models
from fastforward.core import engine as E
from fastforward.core.compiled import BUCKETS
from fastforward.core.decoder import GenerationConfig, SamplingConfig
from fastforward.core.memory import frozen_heap
from fastforward.data import load_dataset
from fastforward.data.base import render_prompt
from fastforward.decoders.registry import build_decoders

args = argparse.Namespace(model="smollm2-135m", dtype="bfloat16", device="cpu", threads=2, path="auto",
                          compile="on", max_new_tokens=128, buckets=None, command="bench", fp32_logits=False,
                          weights="full")
target, _ = load_models(args)
decs = build_decoders(os.environ.get("METHODS", "ar,suffix,qsd"), target, None, {})
samples = load_dataset(os.environ.get("DATASET", "humaneval"), int(os.environ.get("LIMIT", 8)))
config = GenerationConfig(max_new_tokens=128, eos_token_ids=target.eos_token_ids, sampling=SamplingConfig(0.0, 0, 1.0, None))
warm_graphs(target, decs, cache_sizes(target, samples, 128))
prompts = [render_prompt(target.tokenizer, [{"role": "user", "content": s.turns[0]}]) for s in samples]
for d in decs.values():
    d.generate(prompts[0], GenerationConfig(max_new_tokens=16, eos_token_ids=target.eos_token_ids, sampling=config.sampling))
    d.reopen_estimates()
rec = []
orig = E.ModelEngine.forward
def timed(self, blocks, pad_id=0, hidden=False):
    t = time.perf_counter(); out = orig(self, blocks, pad_id, hidden); rec.append((self.model is target.model, max(len(b.tokens) for b in blocks), time.perf_counter() - t))
    return out
E.ModelEngine.forward = timed
settle_pages()
bucket = lambda w: next(b for b in BUCKETS if b >= w)
with frozen_heap():
    for r in range(int(os.environ.get("ROUNDS", 1))):
        agg = {n: dict(wall=0.0, pre=0.0, tok=0, fw=collections.defaultdict(list), other=0.0) for n in decs}
        for i, ids in enumerate(prompts):
            for n in list(decs)[i % len(decs):] + list(decs)[: i % len(decs)]:
                rec.clear(); res = decs[n].generate(ids, config); s = res.stats; a = agg[n]
                a["wall"] += s.wall_time_s; a["pre"] += s.prefill_time_s; a["tok"] += s.new_tokens
                for mine, w, dt in rec:
                    a["fw"][(mine, bucket(w))].append(dt)
                tw = [bucket(w) for mine, w, dt in rec if mine]
                acc = s.accepted_per_step[-len(tw):] if tw else []
                for w, c in zip(tw, acc):
                    a.setdefault("acc", collections.defaultdict(list))[w].append(c)
        for n, a in agg.items():
            fwt = sum(sum(v) for v in a["fw"].values())
            parts = ", ".join(f"{'t' if k[0] else 'd'}{k[1]}: {len(v)} x {st.median(v)*1e3:.1f} ms" for k, v in sorted(a["fw"].items()))
            if "acc" in a:
                print(f"  {n} committed per step by bucket:", {w: (round(sum(v)/len(v), 2), len(v)) for w, v in sorted(a["acc"].items())})
            print(f"{n}: {a['tok']/a['wall']:.1f} tok/s; wall {a['wall']:.2f} s = prefill {a['pre']:.2f} + forwards {fwt:.2f} + rest {a['wall']-a['pre']-fwt:.2f}; {parts}", flush=True)

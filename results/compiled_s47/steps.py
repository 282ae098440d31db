"""Probe (GC=freeze: gc.freeze() after the warm-up): per-step time split (propose / forward / accept+commit / observe) by width, AR vs methods, bf16 compiled SmolLM2."""
import os, sys, time, statistics as st, collections
import torch
torch.set_num_threads(2)
from fastforward.models.loading import load_model
from fastforward.cli.common import compile_target
from fastforward.decoders.registry import build_decoder
from fastforward.core.decoder import GenerationConfig
from fastforward.data import render_prompt, load_dataset
import fastforward.core.batching as B
from fastforward.core.engine import ModelEngine

lm = load_model("smollm2-135m", os.environ.get("DTYPE", "bfloat16"), "cpu", 2, "default", False, "full")
compile_target(lm, 128)
methods = sys.argv[1].split(",")
decs = {m: build_decoder(m, lm) for m in methods}
rec = collections.defaultdict(list)
cur = {"m": None}
orig_fwd = ModelEngine.forward
def fwd(self, blocks, *a, **k):
    t = time.perf_counter(); r = orig_fwd(self, blocks, *a, **k)
    rec[(cur["m"], "fwd", len(blocks[0].tokens))].append(time.perf_counter() - t)
    return r
ModelEngine.forward = fwd
orig_vs = B.verify_step
def vs(engine, proposer, rows, *a, **k):
    t = time.perf_counter(); r = orig_vs(engine, proposer, rows, *a, **k)
    rec[(cur["m"], "step")].append(time.perf_counter() - t)
    return r
B.verify_step = vs
samples = load_dataset(os.environ.get("DS", "humaneval"), int(os.environ.get("LIMIT", 4)))
cfg = GenerationConfig(max_new_tokens=128, eos_token_ids=lm.eos_token_ids)
ids0 = render_prompt(lm.tokenizer, [{"role": "user", "content": samples[0].turns[0]}])
for m, d in decs.items():
    cur["m"] = None; d.generate(ids0, GenerationConfig(max_new_tokens=16, eos_token_ids=lm.eos_token_ids)); d.reopen_estimates()
import gc
gcs = collections.defaultdict(list); gstart = {}
def cb(phase, info):
    if phase == "start": gstart["t"] = time.perf_counter()
    else: gcs[(cur["m"], info["generation"])].append(time.perf_counter() - gstart["t"])
gc.callbacks.append(cb)
if os.environ.get("GC") == "freeze":
    gc.collect(); gc.freeze()
print("gc tracked objects", len(gc.get_objects()), "frozen", gc.get_freeze_count(), flush=True)
tot = collections.Counter(); toks = collections.Counter()
for rnd in range(int(os.environ.get("ROUNDS", 2))):
    for s in samples:
        ids = render_prompt(lm.tokenizer, [{"role": "user", "content": s.turns[0]}])
        for m, d in decs.items():
            cur["m"] = m
            t = time.perf_counter(); r = d.generate(ids, cfg); tot[m] += time.perf_counter() - t; toks[m] += len(r.tokens)
for m in methods:
    steps = rec[(m, "step")]
    fw = {k[2]: v for k, v in rec.items() if k[0] == m and k[1] == "fwd"}
    fsum = sum(sum(v) for v in fw.values())
    print(f"{m}: {toks[m]/tot[m]:.1f} tok/s, {len(steps)} steps, step total {sum(steps):.2f}s of {tot[m]:.2f}s, forwards {fsum:.2f}s; non-forward per step {(sum(steps)-fsum)/len(steps)*1e3:.2f} ms")
    for g in range(3):
        v = gcs[(m, g)]
        if v: print(f"   gc gen{g}: {len(v)} collections, {sum(v)*1e3:.1f} ms in all, max {max(v)*1e3:.1f} ms")
    for w in sorted(fw):
        print(f"   width {w}: n={len(fw[w])} median fwd {st.median(fw[w])*1e3:.2f} ms")

"""Probe: where jacobi/lookahead lose to AR at 98-99% AR steps (SmolLM2 bf16 compiled, huge pages, frozen heap).
Per generation: prefill time, every forward's width and time (from ModelEngine.forward), and the rest."""
import os, sys, time, statistics as st, collections, gc
import torch
torch.set_num_threads(2)
from fastforward.models.loading import load_model
from fastforward.cli.common import compile_target
from fastforward.decoders.registry import build_decoder
from fastforward.core.decoder import GenerationConfig
from fastforward.data import render_prompt, load_dataset
from fastforward.core.engine import ModelEngine
from fastforward.core.memory import huge_pages, freeze_heap
import fastforward.core.batching as B

lm = load_model("smollm2-135m", "bfloat16", "cpu", 2, "default", False, "full")
compile_target(lm, 128)
methods = sys.argv[1].split(",")
decs = {m: build_decoder(m, lm) for m in methods}
cur = {"m": None}
steps = collections.defaultdict(list)  # method -> [(width, ms)]
pre = collections.defaultdict(list)
orig_fwd = ModelEngine.forward
def fwd(self, blocks, *a, **k):
    t = time.perf_counter(); r = orig_fwd(self, blocks, *a, **k)
    if cur["m"]: steps[cur["m"]].append((len(blocks[0].tokens), (time.perf_counter() - t) * 1e3))
    return r
ModelEngine.forward = fwd
orig_pf = B.ProposerDecoder.prefill if hasattr(B.ProposerDecoder, "prefill") else None
samples = load_dataset(os.environ.get("DS", "gsm8k"), int(os.environ.get("LIMIT", 8)))
cfg = GenerationConfig(max_new_tokens=128, eos_token_ids=lm.eos_token_ids)
ids = [render_prompt(lm.tokenizer, [{"role": "user", "content": s.turns[0]}]) for s in samples]
from fastforward.bench.runner import warm_graphs, cache_sizes
warm_graphs(lm, decs, cache_sizes(lm, samples, 128))
for m, d in decs.items():
    d.generate(ids[0], GenerationConfig(max_new_tokens=16, eos_token_ids=lm.eos_token_ids)); d.reopen_estimates()
print(f"huge pages: {huge_pages()/1e9:.2f} GB", flush=True)
freeze_heap()
tot = collections.Counter(); toks = collections.Counter(); gen = collections.defaultdict(list)
for k, i in enumerate(ids):
    order = methods[k % len(methods):] + methods[:k % len(methods)]
    for m in order:
        cur["m"] = m; n0 = len(steps[m])
        t = time.perf_counter(); r = decs[m].generate(i, cfg); el = time.perf_counter() - t
        cur["m"] = None
        tot[m] += el; toks[m] += len(r.tokens)
        s = steps[m][n0:]
        gen[m].append((el * 1e3, sum(ms for _, ms in s), len(s), r.stats.prefill_time_s * 1e3 if hasattr(r.stats, "prefill_time_s") else float("nan")))
for m in methods:
    s = steps[m]
    one = [ms for w, ms in s if w == 1]
    after = [s[j][1] for j in range(1, len(s)) if s[j][0] == 1 and s[j - 1][0] > 1]
    after2 = [s[j][1] for j in range(2, len(s)) if s[j][0] == 1 and s[j - 1][0] == 1 and s[j - 2][0] > 1]
    wide = [(w, ms) for w, ms in s if w > 1]
    g = gen[m]
    el = sum(x[0] for x in g); fw = sum(x[1] for x in g); pf = sum(x[3] for x in g)
    print(f"{m}: {toks[m]/tot[m]:.1f} tok/s, {toks[m]} tokens, total {el:.0f} ms = forwards {fw:.0f} ({len(s)}) + prefill? {pf:.0f} + rest {el-fw-pf:.0f}")
    print(f"   1-token steps: n={len(one)} median {st.median(one):.2f} mean {st.mean(one):.2f} ms sum {sum(one):.0f}; first after a wide step: {['%.1f' % x for x in after]}; second: {['%.1f' % x for x in after2]}")
    print(f"   wide steps: {[(w, round(ms, 1)) for w, ms in wide]} sum {sum(ms for _, ms in wide):.0f} ms")

"""Probe: AR tok/s of compiled bf16 SmolLM2 before and after moving the process's large anonymous regions onto huge pages (madvise HUGEPAGE + COLLAPSE)."""
import ctypes, os, re, sys, time, gc
import torch
torch.set_num_threads(2)
from fastforward.models.loading import load_model
from fastforward.cli.common import compile_target
from fastforward.decoders.registry import build_decoder
from fastforward.core.decoder import GenerationConfig
from fastforward.data import render_prompt, load_dataset

def huge():
    for line in open("/proc/self/smaps_rollup"):
        if line.startswith(("AnonHugePages", "Rss:", "Anonymous:")): print("   ", line.strip(), flush=True)

libc = ctypes.CDLL("libc.so.6", use_errno=True)
libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
def collapse(min_mb=2):
    n = ok = 0; mb = 0
    for line in open("/proc/self/maps"):
        parts = line.split()
        a, b = (int(x, 16) for x in parts[0].split("-"))
        path = parts[5] if len(parts) > 5 else ""
        if path and not path.startswith("["): continue
        if path in ("[stack]", "[vvar]", "[vdso]", "[vsyscall]", "[vvar_vclock]"): continue
        if "w" not in parts[1]: continue
        a2 = (a + (1 << 21) - 1) & ~((1 << 21) - 1); b2 = b & ~((1 << 21) - 1)
        if b2 - a2 < min_mb << 20: continue
        n += 1
        r1 = libc.madvise(a2, b2 - a2, 14)  # MADV_HUGEPAGE
        r2 = libc.madvise(a2, b2 - a2, 25)  # MADV_COLLAPSE
        ok += r2 == 0; mb += (b2 - a2) >> 20
    print(f"   regions {n}, collapsed ok {ok}, {mb} MB", flush=True)

lm = load_model("smollm2-135m", "bfloat16", "cpu", 2, "default", False, "full")
compile_target(lm, 128)
d = build_decoder("ar", lm)
samples = load_dataset("humaneval", 4)
cfg = GenerationConfig(max_new_tokens=128, eos_token_ids=lm.eos_token_ids)
ids = [render_prompt(lm.tokenizer, [{"role": "user", "content": s.turns[0]}]) for s in samples]
d.generate(ids[0], GenerationConfig(max_new_tokens=16, eos_token_ids=lm.eos_token_ids))
gc.collect(); gc.freeze()
def run(tag):
    for rnd in range(2):
        n = 0; t = time.perf_counter()
        for i in ids: n += len(d.generate(i, cfg).tokens)
        print(f"{tag} round {rnd}: {n/(time.perf_counter()-t):.1f} tok/s", flush=True)
mode = os.environ.get("COLLAPSE", "1")
t = time.perf_counter()
if mode == "1": collapse()
print(f"   collapse took {time.perf_counter()-t:.2f} s", flush=True)
huge(); run("huge" if mode == "1" else "plain"); run("again")

"""Issue 32, session 51: does running the bf16 target's package leave the int8 draft's package slower
afterwards? Draft alone, then the target alone, then the draft alone again; threads counted at each stage."""
import argparse, os, time, statistics as st, torch
from fastforward.cli.common import load_models
from fastforward.core.engine import ModelEngine, Block, compile_draft
from fastforward.core.memory import huge_pages
from fastforward.decoders.registry import build_decoders
from fastforward.decoders.speculative import draft_models

args = argparse.Namespace(model="smollm2-135m", dtype="bfloat16", device="cpu", threads=2, path="auto",
                          compile="on", max_new_tokens=128, buckets=None, command="bench", fp32_logits=False,
                          weights="full")
target, _ = load_models(args)
dec = build_decoders("qsd", target, None, {})["qsd"]
(dm,) = draft_models(dec.drafter)
compile_draft(dm, target.model)
ctx = 150
eng = {"target": ModelEngine(target.model), "draft": ModelEngine(dm)}
nt = lambda: len(os.listdir("/proc/self/task"))
def step(e):
    t = time.perf_counter(); f = e.forward([Block.chain([200])], 0); f.argmax; dt = time.perf_counter() - t; e.truncate(0, ctx); return dt * 1e3
with torch.inference_mode():
    for e in eng.values():
        e.start(torch.arange(100, 100 + ctx)[None], capacity=ctx + 200)
        for _ in range(3): step(e)
    if os.environ.get("HUGE", "1") == "1": huge_pages()
    for stage in os.environ.get("STAGES", "draft target draft target draft").split():
        v = [step(eng[stage]) for _ in range(int(os.environ.get("N", 60)))]
        print(f"{stage}: {st.median(v[5:]):.2f} ms (first {v[0]:.1f}), threads {nt()}", flush=True)

"""Issue 32, session 51: the qsd draft's (SmolLM2's int8 copy) 1-token step against the target's (bf16),
both through their stored packages, one process, in turns; 512-slot caches after 150 cached tokens."""
import argparse, os, time, statistics as st, torch
from fastforward.decoders.speculative import draft_models
from fastforward.cli.common import load_models
from fastforward.core.engine import ModelEngine, Block, compile_draft
from fastforward.core.memory import huge_pages
from fastforward.decoders.registry import build_decoders

args = argparse.Namespace(model="smollm2-135m", dtype="bfloat16", device="cpu", threads=2, path="auto",
                          compile="on", max_new_tokens=128, buckets=None, command="bench", fp32_logits=False,
                          weights=os.environ.get("WEIGHTS", "full"))
target, _ = load_models(args)
opts = dict(x.split("=") for x in os.environ.get("OPTS", "").split(",") if x)
dec = build_decoders("qsd", target, None, {"qsd": opts} if opts else {})["qsd"] if os.environ.get("QSD", "1") == "1" else None
models = {"target": target.model}
if dec is not None:
    (dm,) = draft_models(dec.drafter)
    compile_draft(dm, target.model)
    models["draft"] = dm
ctx = 150
engines = {n: ModelEngine(m) for n, m in models.items()}
def step(e):
    t = time.perf_counter(); f = e.forward([Block.chain([200])], 0); f.argmax; dt = time.perf_counter() - t; e.truncate(0, ctx); return dt * 1e3
with torch.inference_mode():
    for e in engines.values():
        e.start(torch.arange(100, 100 + ctx)[None], capacity=ctx + 200)
        for _ in range(5): step(e)
    print("huge", huge_pages())
    engines = {n: e for n, e in engines.items() if n in os.environ.get("TIME", "target,draft")}
    ts = {n: [] for n in engines}
    for r in range(8):
        for n, e in engines.items():
            for j in range(12):
                dt = step(e)
                if j >= 2: ts[n].append(dt)
    print({n: round(st.median(v), 2) for n, v in ts.items()})
    # per position within a spell: does the penalty decay after a switch?
    if len(engines) > 1:
        pos = {n: [[] for _ in range(12)] for n in engines}
        for r in range(8):
            for n, e in engines.items():
                for j in range(12):
                    pos[n][j].append(step(e))
        for n in engines:
            print(n, [round(st.median(v), 1) for v in pos[n]])
        alt = {n: [] for n in engines}
        for r in range(100):  # strict alternation, as qsd's draft and verify steps
            for n, e in engines.items():
                alt[n].append(step(e))
        print("alternating", {n: round(st.median(v), 2) for n, v in alt.items()})
    # the draft between passes over a 300 MB buffer (no model): is it the cache the target's step evicts?
    if "draft" in engines:
        buf = torch.ones(150_000_000, dtype=torch.bfloat16)
        for what, between in (("alone", None), ("after a 300 MB read", lambda: buf.sum()), ("after 32 MB", lambda: buf[:16_000_000].sum())):
            v = []
            for r in range(60):
                if between is not None: between()
                v.append(step(engines["draft"]))
            print("draft", what, round(st.median(v[5:]), 2))
    if "draft" in engines:
        a = torch.randn(512, 2048, dtype=torch.bfloat16); b = torch.randn(2048, 2048, dtype=torch.bfloat16)
        v = []
        for r in range(40):
            for _ in range(4): a @ b
            v.append(step(engines["draft"]))
        print("draft after bf16 GEMMs", round(st.median(v[5:]), 2))
        t = ModelEngine(target.model); t.start(torch.arange(100, 100 + ctx)[None], capacity=ctx + 200)
        for _ in range(30): step(engines["draft"])
        for burst in (1, 12):
            seq = []
            for rep in range(4):
                for _ in range(burst): step(t)
                seq.append([round(step(engines["draft"]), 1) for _ in range(30)])
            print(f"draft steps after {burst} target steps:", [round(st.median(c), 1) for c in zip(*seq)])
    if "target" in engines and "draft" in engines:
        import resource
        flt = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for label, seq in (("draft alone", ["draft"]), ("target alone", ["target"]), ("alternating", ["target", "draft"])):
            f0 = flt(); v = {n: [] for n in seq}
            for r in range(40):
                for n in seq: v[n].append(step(engines[n]))
            print(label, {n: round(st.median(x[5:]), 2) for n, x in v.items()}, "minor faults per step", round((flt() - f0) / (40 * len(seq)), 1))

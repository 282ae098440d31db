"""Does a compiled package warmed in one thread run slower in another? MODE=same|cross|mainwarm"""
import os, sys, time, threading, statistics as st, torch
torch.set_num_threads(2)
from fastforward.core.compiled import inductor_cache
from fastforward.core.engine import ModelEngine, compile_forward, Block
from fastforward.models.cache import cache_root, compiled_dir
from fastforward.models.loading import load_model
inductor_cache(str(cache_root()))
lm = load_model("smollm2-135m", "bfloat16", path="default", threads=2)
compile_forward(lm.model, 1024, mode="max-autotune", store=compiled_dir())
eng = ModelEngine(lm.model)
ctx = 128
def warm():
    with torch.inference_mode():
        eng.start(torch.arange(100, 100 + ctx)[None], capacity=ctx + 100)
        for _ in range(5):
            eng.forward([Block.chain([200])], 0); eng.truncate(0, ctx)
def cpu():
    out = {}
    for t in os.listdir('/proc/self/task'):
        try:
            f = open(f'/proc/self/task/{t}/stat').read().rsplit(')', 1)[1].split()
            out[t] = int(f[11]) + int(f[12])
        except OSError:
            pass
    return out
def timed(tag):
    c0 = cpu()
    with torch.inference_mode():
        ts = []
        for _ in range(40):
            t = time.perf_counter(); eng.forward([Block.chain([200])], 0); ts.append((time.perf_counter() - t) * 1e3); eng.truncate(0, ctx)
    c1 = cpu(); print({t: c1[t] - c0.get(t, 0) for t in c1}, "me", threading.get_native_id())
    print(f"{tag}: k1 median {st.median(ts):.2f} ms  tasks {len(os.listdir('/proc/self/task'))}", flush=True)
def in_thread(f, *a):
    t = threading.Thread(target=f, args=a); t.start(); t.join()
mode = os.environ.get("MODE", "same")
if mode == "same":
    in_thread(lambda: (warm(), timed("same thread")))
elif mode == "cross":
    in_thread(warm); in_thread(timed, "other thread"); in_thread(timed, "third thread")
elif mode == "mainop":
    x = torch.randn(4_000_000); print("sum", float((x * 2).sum()))
    in_thread(lambda: (warm(), timed("other thread after a main op")))
elif mode == "mainop1":
    torch.set_num_threads(1); x = torch.randn(4_000_000); print("sum", float((x * 2).sum())); torch.set_num_threads(2)
    in_thread(lambda: (warm(), timed("other thread after a 1-thread main op")))
elif mode == "mainwarm":
    warm(); timed("main"); in_thread(timed, "other thread")

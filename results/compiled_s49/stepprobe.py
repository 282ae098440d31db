"""Where a compiled step's time goes outside the compiled call (probe, session 49): wraps the engine's functions with
perf_counter and runs `fastforward bench` in-process. Run: PYTHONPATH=src python results/compiled_s49/stepprobe.py bench
--model smollm2-135m --dtype bfloat16 --compile on --dataset gsm8k --limit 3 --max-new-tokens 128 --methods ar"""
import sys, time, collections, atexit, functools
from fastforward.core import compiled, engine, batching, acceptance
from fastforward.cli import main
T = collections.defaultdict(list)
def wrap(mod, name, label=None):
    f = getattr(mod, name)
    @functools.wraps(f)
    def g(*a, **k):
        t0 = time.perf_counter(); out = f(*a, **k); T[label or name].append((time.perf_counter() - t0) * 1e6); return out
    setattr(mod, name, g)
wrap(compiled.CompiledForward, "__call__", "compiled_call")
wrap(engine, "block_inputs")
wrap(batching, "verify_step")
wrap(engine.ModelEngine, "keep")
wrap(engine.ModelEngine, "forward", "engine_forward")
prop = engine.Forward.argmax
def am(self):
    t0 = time.perf_counter(); out = prop.fget(self); T["argmax"].append((time.perf_counter() - t0) * 1e6); return out
engine.Forward.argmax = property(am)
def report():
    for k, xs in T.items():
        xs = sorted(xs); n = len(xs)
        print(f"{k:16s} n {n:5d} median {xs[n//2]:9.1f} us  p25 {xs[n//4]:9.1f}", file=sys.stderr)
atexit.register(report)
sys.exit(main(sys.argv[1:]))

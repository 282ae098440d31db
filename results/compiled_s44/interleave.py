"""k=1 and k=8 forward costs, interleaved: llama.cpp (llama-bench pp1/pp8 after 200 cached tokens) and our
compiled engine (the same widths after 200 cached tokens), round after round, so host drift hits both.
DTYPE float32 (default; llama.cpp F32) or bfloat16 (llama.cpp BF16); LLAMA the llama.cpp folder.
   PYTHONPATH=src .venv/bin/python results/compiled_s44/interleave.py"""
import json, os, subprocess, time
import torch
from fastforward.core.compiled import inductor_cache
from fastforward.core.engine import Block, ModelEngine, compile_forward
from fastforward.models.cache import cache_root, compiled_dir
from fastforward.models.loading import load_model

DTYPE = os.environ.get("DTYPE", "float32")
KIND = {"float32": "F32", "bfloat16": "BF16"}[DTYPE]
LLAMA = os.path.expanduser(os.environ.get("LLAMA", "~/.cache/fastforward/llamacpp"))
B = f"{LLAMA}/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin/llama-bench"
G = f"{LLAMA}/smollm2-135m-{KIND}.gguf"
ROUNDS = int(os.environ.get("ROUNDS", "6"))
inductor_cache(str(cache_root()))
lm = load_model("smollm2-135m", DTYPE, path="default", threads=2)
compile_forward(lm.model, store=compiled_dir())
engine = ModelEngine(lm.model)
prompt = torch.arange(100, 300)[None]
rows = []
with torch.inference_mode():
    engine.start(prompt, capacity=300)
    for k in (1, 8):  # warm both widths
        engine.forward([Block.chain([7] * k)]); engine.truncate(0, 200)
    for rnd in range(ROUNDS):
        ours = {}
        for k in (1, 8):
            ts = []
            for _ in range(9):
                t0 = time.perf_counter(); engine.forward([Block.chain([7] * k)]); ts.append((time.perf_counter() - t0) * 1e3)
                engine.truncate(0, 200)
            ours[k] = sorted(ts)[4]
        out = subprocess.run([B, "-m", G, "-p", "1,8", "-n", "0", "-d", "200", "-t", "2", "-r", "5", "-o", "jsonl"],
                             capture_output=True, text=True, timeout=300).stdout
        ll = {r["n_prompt"]: r["avg_ns"] / 1e6 for r in map(json.loads, filter(None, out.splitlines()))}
        row = {"dtype": DTYPE, "round": rnd, "ours_k1": round(ours[1], 2), "ours_k8": round(ours[8], 2),
               "ours_k8_k1": round(ours[8] / ours[1], 2), "llamacpp_k1": round(ll[1], 2), "llamacpp_k8": round(ll[8], 2),
               "llamacpp_k8_k1": round(ll[8] / ll[1], 2)}
        print(json.dumps(row), flush=True); rows.append(row)
    engine.close()
med = lambda xs: sorted(xs)[len(xs) // 2]
print("median ours k8/k1", med([r["ours_k8_k1"] for r in rows]), f"llama.cpp {KIND} k8/k1", med([r["llamacpp_k8_k1"] for r in rows]))

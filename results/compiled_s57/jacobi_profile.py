"""One prompt, AR and jacobi alternated in one process, then cProfiled (session 57): `PYTHONPATH=src python results/compiled_s57/jacobi_profile.py`."""
import cProfile, pstats, time, torch, sys
from fastforward.core.compiled import inductor_cache
from fastforward.core.engine import compile_forward
from fastforward.models.cache import cache_root, compiled_dir
from fastforward.models.loading import load_model
from fastforward.decoders.registry import build_decoder
from fastforward.core.decoder import GenerationConfig
inductor_cache(str(cache_root()))
lm = load_model("smollm2-135m", "float32", path="default", threads=2)
compile_forward(lm.model, store=compiled_dir())
ids = lm.tokenizer.apply_chat_template([{"role": "user", "content": "Write a short story about a robot who learns to paint, in three paragraphs."}], add_generation_prompt=True)
ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
cfg = GenerationConfig(max_new_tokens=128)
decs = {n: build_decoder(n, lm) for n in ("ar", "jacobi")}
for n, d in decs.items(): d.generate(list(ids), cfg)
for r in range(3):
    for n, d in decs.items():
        t = time.perf_counter(); out = d.generate(list(ids), cfg); dt = time.perf_counter() - t
        print(n, r, f"{dt:.3f} s", len(out.tokens), flush=True)
for n, d in decs.items():
    pr = cProfile.Profile(); pr.enable(); d.generate(list(ids), cfg); pr.disable()
    print("=====", n); st = pstats.Stats(pr); st.sort_stats("cumtime").print_stats("fastforward", 25)

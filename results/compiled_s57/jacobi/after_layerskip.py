"""AR's and jacobi's generation right after a layerskip generation against right after an AR one (one process,
compiled SmolLM2 float32, one MT-bench-like prompt, 128 tokens), alternated 4 rounds (session 57)."""
import time, torch
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
ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
cfg = GenerationConfig(max_new_tokens=128)
d = {n: build_decoder(n, lm) for n in ("ar", "jacobi", "layerskip")}
for n in d: d[n].generate(ids, cfg)
def timed(n):
    t = time.perf_counter(); d[n].generate(ids, cfg); return time.perf_counter() - t
for r in range(4):
    for before in ("ar", "layerskip"):
        for n in ("ar", "jacobi"):
            d[before].generate(ids, cfg)
            print(f"round {r} {n:6s} after {before:9s} {timed(n):.3f} s", flush=True)

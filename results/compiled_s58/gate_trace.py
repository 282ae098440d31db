"""Jacobi's step gate through a bench's MT-bench turns (session 58): SmolLM2 float32, compiled, 8 prompts x 2
turns, 128 tokens, each turn's AR generation then jacobi's (the next turn continues AR's answer, as the bench
does), after the bench's warm-up. Every step the gate records is logged with the gate's estimates after it
(tokens per parallel step, ms per parallel step, ms per AR step), so a long run of parallel steps can be traced
to what the gate believed. `PYTHONPATH=src python results/compiled_s58/gate_trace.py > gate_trace.txt`"""

import time

from fastforward.bench.runner import cache_sizes, warm_graphs
from fastforward.core import pacing
from fastforward.core.compiled import inductor_cache
from fastforward.core.decoder import GenerationConfig
from fastforward.core.engine import compile_forward
from fastforward.data import load_dataset
from fastforward.data.base import render_prompt
from fastforward.decoders.registry import build_decoder
from fastforward.models.cache import cache_root, compiled_dir
from fastforward.models.loading import load_model

inductor_cache(str(cache_root()))
lm = load_model("smollm2-135m", "float32", path="default", threads=2)
compile_forward(lm.model, store=compiled_dir())
samples = list(load_dataset("mtbench", limit=8))
cfg = GenerationConfig(max_new_tokens=128)
decs = {n: build_decoder(n, lm) for n in ("ar", "jacobi")}
gate = decs["jacobi"].gate
log: list[str] = []
record = pacing.StepGate.record


def logged(self, parallel: bool, tokens: int, ms: float) -> None:
    record(self, parallel, tokens, ms)
    t, p, a = self.tokens.value, self.parallel_ms.value, self.ar_ms.value
    log.append(f"{'P' if parallel else 'a'} {tokens} {ms:6.1f} | tok {t or 0:.2f} par {p or 0:.1f} ar {a or 0:.1f} run {self.run} every {self._every} backoff {self.backoff}")


pacing.StepGate.record = logged
warm_graphs(lm, decs, cache_sizes(lm, samples, cfg.max_new_tokens))
first = render_prompt(lm.tokenizer, [{"role": "user", "content": samples[0].turns[0]}])
for d in decs.values():
    d.generate(first, GenerationConfig(max_new_tokens=16))
    d.reopen_estimates()
print("gate ratio from the cost curve:", gate.ratio, "opening wait:", gate.opening())
for i, s in enumerate(samples):
    messages: list[dict[str, str]] = []
    for turn, user in enumerate(s.turns):
        messages.append({"role": "user", "content": user})
        ids = render_prompt(lm.tokenizer, messages)
        t = time.perf_counter()
        ref = decs["ar"].generate(ids, cfg)
        ar_s = time.perf_counter() - t
        log.clear()
        t = time.perf_counter()
        out = decs["jacobi"].generate(ids, cfg)
        jac_s = time.perf_counter() - t
        par = sum(line.startswith("P") for line in log)
        print(f"== sample {i} turn {turn}: AR {1000 * ar_s / len(ref.tokens):.1f} ms/token, jacobi {1000 * jac_s / len(out.tokens):.1f}, parallel steps {par}")
        if par:
            print("\n".join(log))
        messages.append({"role": "assistant", "content": lm.tokenizer.decode(ref.tokens, skip_special_tokens=True)})

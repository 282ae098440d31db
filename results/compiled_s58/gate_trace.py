"""Jacobi's step gate through a bench's MT-bench turns (session 58): SmolLM2 float32, compiled, 8 prompts x 2
turns, 128 tokens, each turn's AR generation then jacobi's (the next turn continues AR's answer, as the bench
does), after the bench's warm-up. Every step the gate records is logged with the gate's estimates after it
(tokens per parallel step, ms per parallel step, ms per AR step), so a long run of parallel steps can be traced
to what the gate believed. `PYTHONPATH=src python results/compiled_s58/gate_trace.py > gate_trace.txt`"""

import time

from bench_like import setup

from fastforward.core import pacing
from fastforward.data.base import render_prompt

lm, samples, cfg, decs = setup("ar,jacobi")
gate = decs["jacobi"].gate
log: list[str] = []
record = pacing.StepGate.record


def logged(self, parallel: bool, tokens: int, ms: float) -> None:
    record(self, parallel, tokens, ms)
    t, p, a = self.tokens.value, self.parallel_ms.value, self.ar_ms.value
    log.append(f"{'P' if parallel else 'a'} {tokens} {ms:6.1f} | tok {t or 0:.2f} par {p or 0:.1f} ar {a or 0:.1f} run {self.run} every {self._every} backoff {self.backoff}")


pacing.StepGate.record = logged
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

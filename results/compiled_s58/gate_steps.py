"""Jacobi's step gate at its defaults, step by step (session 58): SmolLM2 float32, compiled, 8 MT-bench
first turns twice, 128 tokens, AR and jacobi alternated in one process after a bench-like warm-up. Every step the
gate records (its kind, tokens, ms) is logged by wrapping StepGate.record in this script only, so the cost of
the bursts and of the AR steps right after them can be read against AR's own steps.
`PYTHONPATH=src python results/compiled_s58/gate_steps.py > results/compiled_s58/gate_steps.txt`"""

import statistics
import time

from bench_like import setup

from fastforward.core import pacing
from fastforward.data.base import render_prompt

lm, samples, cfg, decs = setup("ar,jacobi")
log: list[tuple[bool, int, float]] = []
record = pacing.StepGate.record


def logged(self, parallel: bool, tokens: int, ms: float) -> None:
    log.append((parallel, tokens, ms))
    record(self, parallel, tokens, ms)


pacing.StepGate.record = logged
gate = decs["jacobi"].gate if hasattr(decs["jacobi"], "gate") else None
print("gate ratio from the cost curve:", getattr(gate, "ratio", "?"), "opening wait:", gate.opening() if gate else "?")
times = {n: 0.0 for n in decs}
toks = {n: 0 for n in decs}
steps: list[tuple[bool, int, float]] = []
for i, s in enumerate(samples + samples):  # two rounds
    ids = render_prompt(lm.tokenizer, [{"role": "user", "content": s.turns[0]}])
    for n in (("ar", "jacobi") if i % 2 == 0 else ("jacobi", "ar")):
        log.clear()
        t = time.perf_counter()
        out = decs[n].generate(ids, cfg)
        times[n] += time.perf_counter() - t
        toks[n] += len(out.tokens)
        if n == "jacobi":
            steps += log
            print(f"prompt {i}: jacobi parallel steps {sum(p for p, _, _ in log)}, gate ar {len(log) - sum(p for p, _, _ in log)}, backoff {gate.backoff if gate else '?'}")
ar_ms = [ms for p, _, ms in steps if not p]
med = statistics.median(ar_ms)
print(f"AR {toks['ar'] / times['ar']:.2f} tok/s, jacobi {toks['jacobi'] / times['jacobi']:.2f} tok/s, ratio {toks['jacobi'] / times['jacobi'] / (toks['ar'] / times['ar']):.3f}")
print(f"jacobi's AR-gated steps: {len(ar_ms)}, median {med:.2f} ms")
excess_burst = 0.0
excess_after = 0.0
for k, (p, tok, ms) in enumerate(steps):
    if p:
        excess_burst += ms - tok * med
        print(f"  parallel step {k}: {ms:.1f} ms, {tok} tokens")
    elif k and steps[k - 1][0]:
        after = [steps[j][2] for j in range(k, min(k + 4, len(steps)))]
        excess_after += sum(a - med for a in after)
        print(f"  AR steps after the burst: {', '.join(f'{a:.1f}' for a in after)} ms")
total = sum(ms for _, _, ms in steps)
print(f"bursts' loss {excess_burst:.0f} ms, the 4 AR steps after each burst {excess_after:.0f} ms beyond the median; of {total:.0f} ms of jacobi steps: {100 * excess_burst / total:.1f}% + {100 * excess_after / total:.1f}%")

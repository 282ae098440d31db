"""Is jacobi's AR-gated step slower than AR's beside the draft rows (session 58)? SmolLM2 float32, compiled,
the decoders ar, ar:twin, jacobi (gate=auto), qsd and layerskip in one process as a bench builds them, after
the bench's warm-up; 8 MT-bench first turns x ROUNDS, 128 tokens, each turn's rows in the bench's random order.
Prints tokens/s per row and jacobi's and the twin's time over AR's per turn.
`PYTHONPATH=src python results/compiled_s58/rows_in_one_process.py`"""

import os
import random
import statistics
import time

from bench_like import setup

from fastforward.data.base import render_prompt

lm, samples, cfg, decs = setup(os.environ.get("METHODS", "ar,ar:twin,jacobi,qsd,layerskip"), settle=True)
names = list(decs)
times = {n: 0.0 for n in names}
toks = {n: 0 for n in names}
rel: dict[str, list[float]] = {n: [] for n in names}
k = 0
for r in range(int(os.environ.get("ROUNDS", "2"))):
    for s in samples:
        ids = render_prompt(lm.tokenizer, [{"role": "user", "content": s.turns[0]}])
        per = {}
        for n in random.Random(f"bench-turn-{k}").sample(names, len(names)):
            t = time.perf_counter()
            out = decs[n].generate(ids, cfg)
            dt = time.perf_counter() - t
            times[n] += dt
            toks[n] += len(out.tokens)
            per[n] = dt / len(out.tokens)
        k += 1
        for n in names:
            rel[n].append(per[n] / per["ar"])
        print(k, " ".join(f"{n} {1000 * per[n]:.1f}" for n in names), flush=True)
for n in names:
    print(f"{n}: {toks[n] / times[n]:.2f} tok/s, {toks[n] / times[n] / (toks['ar'] / times['ar']):.3f}x of AR; "
          f"its time per token over AR's, median of turns {statistics.median(rel[n]):.3f}")

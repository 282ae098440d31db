"""What a gated method's own AR steps cost beside AR's (docs/results.md, session 40): SmolLM2 fp32 through
the compiled engine, one prompt, 128 tokens, the methods interleaved round after round, median ms per token.

    python results/compiled_s40/held_to_ar.py ar,lookahead,jacobi held --rounds 3
    python results/compiled_s40/held_to_ar.py ar,layerskip held --rounds 5
    python results/compiled_s40/held_to_ar.py ar,layerskip free --rounds 5

``held`` replaces, in this process only, the step gate's and gamma_auto's choice by "a plain AR step" (a
measurement, not a mode the library offers): what is left is each method's per-step bookkeeping around the
same 1-token forwards. ``free`` runs the default schedules.
"""

import argparse
import statistics
import time

from fastforward.cli.common import generation_config, load_models
from fastforward.core import pacing
from fastforward.core.options import parse_options
from fastforward.data.base import render_prompt
from fastforward.decoders.registry import build_decoders

PROMPT = "Write a short story about a robot learning to paint, in about 200 words."


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("methods")
    p.add_argument("mode", choices=("held", "free"))
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args()
    if a.mode == "held":
        pacing.StepGate.parallel = lambda self: False
        pacing.CostTracker.choose = lambda self, limit: 0
    args = argparse.Namespace(
        model="smollm2-135m", dtype="float32", device="cpu", threads=2, path="auto", compile="on", weights="full",
        fp32_logits=False, draft=None, max_new_tokens=128, temperature=0.0, top_k=0, top_p=1.0, seed=None,
        json_schema=None, json_object=False, regex=None, choice=None,
    )  # fmt: skip
    target, _ = load_models(args)
    decoders = build_decoders(a.methods, target, None, parse_options([]))
    config = generation_config(args, target)
    ids = render_prompt(target.tokenizer, [{"role": "user", "content": PROMPT}])
    for d in decoders.values():  # warm-up
        d.generate(ids, config)
    ms: dict[str, list[float]] = {n: [] for n in decoders}
    for _ in range(a.rounds):
        for n, d in decoders.items():
            t = time.perf_counter()
            out = d.generate(ids, config)
            ms[n].append(1000 * (time.perf_counter() - t) / len(out.tokens))
    for n, v in ms.items():
        print(f"{n}: median {statistics.median(v):.2f} ms/token, rounds {[round(x, 1) for x in v]}")


if __name__ == "__main__":
    main()

"""Issue 32, session 51: where jacobi/lookahead lose ~3% to AR at 99-100% AR steps (bf16 SmolLM2, compiled).

Runs METHODS on the same MT-bench first turns in one process, alternating, ROUNDS rounds (after the bench's
warm-up); prints each method's total tokens/s per round, then cProfiles one generation of each and prints the
functions with the most own time.
"""
import argparse, cProfile, io, os, pstats, time
import torch
from fastforward.bench.runner import cache_sizes, settle_pages, warm_graphs
from fastforward.cli.common import load_models
from fastforward.core.decoder import GenerationConfig, SamplingConfig
from fastforward.core.memory import frozen_heap
from fastforward.data import load_dataset
from fastforward.data.base import render_prompt
from fastforward.decoders.registry import build_decoders

args = argparse.Namespace(model="smollm2-135m", dtype="bfloat16", device="cpu", threads=2, path="auto",
                          compile="on", max_new_tokens=128, buckets=None, command="bench", fp32_logits=False,
                          weights="full")
target, _ = load_models(args)
decs = build_decoders(os.environ.get("METHODS", "ar,jacobi,lookahead"), target, None, {})
samples = load_dataset("mtbench", int(os.environ.get("LIMIT", 6)))
config = GenerationConfig(max_new_tokens=128, eos_token_ids=target.eos_token_ids, sampling=SamplingConfig(0.0, 0, 1.0, None))
warm_graphs(target, decs, cache_sizes(target, samples, 128))
prompts = [render_prompt(target.tokenizer, [{"role": "user", "content": s.turns[0]}]) for s in samples]
for d in decs.values():
    d.generate(prompts[0], GenerationConfig(max_new_tokens=16, eos_token_ids=target.eos_token_ids, sampling=config.sampling))
    d.reopen_estimates()
settle_pages()
with frozen_heap():
    for r in range(int(os.environ.get("ROUNDS", 3))):
        tot = {n: [0, 0.0, 0] for n in decs}
        for i, ids in enumerate(prompts):
            names = list(decs)[i % len(decs):] + list(decs)[: i % len(decs)]
            for n in names:
                t = time.perf_counter(); res = decs[n].generate(ids, config); dt = time.perf_counter() - t
                tot[n][0] += res.stats.new_tokens; tot[n][1] += dt; tot[n][2] += res.stats.target_forwards
        base = tot["ar"][0] / tot["ar"][1]
        print(f"round {r}: " + ", ".join(f"{n} {v[0]/v[1]:.1f} tok/s ({v[0]/v[1]/base:.3f}x, {v[1]/v[2]*1e3:.2f} ms/fwd)" for n, v in tot.items()), flush=True)
    if os.environ.get("PROFILE", "1") == "1":
        for n, d in decs.items():
            pr = cProfile.Profile(); pr.enable()
            for ids in prompts[:3]:
                d.generate(ids, config)
            pr.disable()
            s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(18)
            print(f"=== {n}\n" + "\n".join(s.getvalue().splitlines()[:45]), flush=True)

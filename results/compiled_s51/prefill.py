"""Issue 32, session 51: how much of a bench turn's wall time is the prefill (bf16 SmolLM2, compiled AR)."""
import argparse, os, time
from fastforward.bench.runner import cache_sizes, settle_pages, warm_graphs
from fastforward.cli.common import load_models
from fastforward.core.decoder import GenerationConfig, SamplingConfig
from fastforward.data import load_dataset
from fastforward.data.base import render_prompt
from fastforward.decoders.registry import build_decoders

args = argparse.Namespace(model="smollm2-135m", dtype=os.environ.get("DTYPE", "bfloat16"), device="cpu", threads=2,
                          path="auto", compile="on", max_new_tokens=128, buckets=None, command="bench",
                          fp32_logits=False, weights="full")
target, _ = load_models(args)
decs = build_decoders("ar", target, None, {})
config = GenerationConfig(max_new_tokens=128, eos_token_ids=target.eos_token_ids, sampling=SamplingConfig(0.0, 0, 1.0, None))
for ds in os.environ.get("DATASETS", "humaneval mtbench gsm8k").split():
    samples = load_dataset(ds, 8)
    warm_graphs(target, decs, cache_sizes(target, samples, 128))
    prompts = [render_prompt(target.tokenizer, [{"role": "user", "content": s.turns[0]}]) for s in samples]
    decs["ar"].generate(prompts[0], config)
    settle_pages()
    tp = tw = 0.0; n = 0; lens = []
    for ids in prompts:
        r = decs["ar"].generate(ids, config)
        tp += r.stats.prefill_time_s; tw += r.stats.wall_time_s; n += r.stats.new_tokens; lens.append(len(ids))
    print(f"{ds}: prompt tokens {min(lens)}-{max(lens)} (mean {sum(lens)/len(lens):.0f}); prefill {tp/len(prompts)*1e3:.0f} ms a turn = {tp/tw:.1%} of wall; tok/s {n/tw:.1f}, without prefill {n/(tw-tp):.1f}", flush=True)

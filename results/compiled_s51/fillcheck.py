import argparse, os
from fastforward.cli.common import load_models
from fastforward.core.decoder import GenerationConfig, SamplingConfig
from fastforward.data import load_dataset
from fastforward.data.base import render_prompt
from fastforward.decoders.registry import build_decoders
args = argparse.Namespace(model="smollm2-135m", dtype="bfloat16", device="cpu", threads=2, path="auto", compile="on", max_new_tokens=128, buckets=None, command="bench", fp32_logits=False, weights="full")
target, _ = load_models(args)
dec = build_decoders("suffix", target, None, {})["suffix"]
cfg = GenerationConfig(max_new_tokens=128, eos_token_ids=target.eos_token_ids, sampling=SamplingConfig(0.0, 0, 1.0, None))
tot = {}
for s in load_dataset("humaneval", 8):
    r = dec.generate(render_prompt(target.tokenizer, [{"role": "user", "content": s.turns[0]}]), cfg)
    for k, v in r.stats.extras.items():
        if isinstance(v, int): tot[k] = tot.get(k, 0) + v
    tot.setdefault("hist", [0]*40)
    for w, c in enumerate(r.stats.width_hist): tot["hist"][w] += c
print(tot)

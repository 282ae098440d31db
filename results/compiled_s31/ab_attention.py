"""Session 31: the decoding-width attention of compiled CPU graphs, A/B in one process. Two copies of SmolLM2
fp32, each compiled in process (max-autotune, freezing, 1024-slot fixed cache): A attends through
grouped_attention (what 367d4b3 compiles), B through the SDPA kernel (what it compiled before). Their AR
generations alternate, 2 GSM8K prompts x 128 tokens per round, 4 rounds; the first round is a warm-up.
`python results/compiled_s31/ab_attention.py [float32|bfloat16]`."""
import argparse, sys, time
from dataclasses import replace
import torch
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
from fastforward.cli.common import load_models, generation_config
from fastforward.decoders.registry import build_decoder
from fastforward.data import render_prompt, load_dataset
from fastforward.core.engine import compile_forward


def flash(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kw):
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask[:, :, :, : key.shape[-2]], scale=scaling, enable_gqa=True)
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register("ab_sdpa_kernel", flash)
AttentionMaskInterface.register("ab_sdpa_kernel", sdpa_mask)
dtype = sys.argv[1] if len(sys.argv) > 1 else "float32"
args = argparse.Namespace(model="smollm2-135m", dtype=dtype, device="cpu", threads=2, path="default",
    compile="off", max_new_tokens=128, methods="ar", draft=None, fp32_logits=False, weights="full",
    temperature=0.0, top_k=0, top_p=1.0, seed=None, command="bench")
for k in ("json_schema", "regex", "choice", "grammar", "json_object"):
    setattr(args, k, None)
runs = {}
for name in ("grouped", "flash"):
    target, _ = load_models(argparse.Namespace(**vars(args)))
    compile_forward(target.model, 1024, mode="max-autotune", store=None)
    if name == "flash":
        target.model.set_attn_implementation("ab_sdpa_kernel")
    runs[name] = (target, build_decoder("ar", target, None, {}))
config = generation_config(args, runs["grouped"][0])
tok = runs["grouped"][0].tokenizer
ps = [render_prompt(tok, [{"role": "user", "content": s.turns[0]}]) for s in load_dataset("gsm8k", limit=2)]
for name, (_, d) in runs.items():
    t = time.time(); d.generate(ps[0], replace(config, max_new_tokens=8)); print(name, "compile", round(time.time() - t, 1), flush=True)
tot = {n: [0.0, 0] for n in runs}
outs = {n: [] for n in runs}
for rnd in range(4):
    for name in (("grouped", "flash") if rnd % 2 == 0 else ("flash", "grouped")):
        w = n = 0
        for p in ps:
            r = runs[name][1].generate(p, config); w += r.stats.wall_time_s; n += len(r.tokens)
            if rnd == 0:
                outs[name].append(r.tokens)
        print(f"round {rnd} {name:8s} {n / w:6.1f} tok/s", flush=True)
        if rnd:
            tot[name][0] += w; tot[name][1] += n
for name, (w, n) in tot.items():
    print(f"{name:8s} {n / w:6.1f} tok/s over rounds 1-3 ({n} tokens)")
print("ratio grouped/flash", round((tot["grouped"][1] / tot["grouped"][0]) / (tot["flash"][1] / tot["flash"][0]), 3))
print("same tokens", outs["grouped"] == outs["flash"])

"""Session 31: in-process compiled 1-token AR step of SmolLM2 (max-autotune, freezing, 1024-slot fixed cache), 2 GSM8K prompts x 128 tokens x 2 reps, with the attention as SDPA or as grouped matmuls (ATTN=sdpa|math) and the GEMM backends inductor default or ATen only (GEMM=default|aten). A scratch script: it swaps the attention function before compiling. `ATTN=math GEMM=aten python results/compiled_s31/attention_exp.py bfloat16`. Compares with eager AR (plain SDPA) token for token."""
import argparse, os, sys, time
from dataclasses import replace
import torch
import torch._inductor.config as ic
from fastforward.core import compiled as C
if os.environ.get("GEMM") == "aten":
    ic.max_autotune_gemm_backends = "ATEN"
def gqa_math(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kw):
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    plain = not any(kw.get(k) for k in ("softcap", "position_bias", "output_attentions", "cache"))
    if not plain or dropout or attention_mask is None or query.shape[1] == key.shape[1]:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout, scaling, is_causal, **kw)
    b, hq, q, d = query.shape; hk = key.shape[1]; g = hq // hk; s = key.shape[2]
    scale = scaling if scaling is not None else d ** -0.5
    qq = query.reshape(b, hk, g * q, d).float()
    sc = (qq @ key.float().transpose(-1, -2)).view(b, hk, g, q, s) * scale
    m = attention_mask[:, :, :, :s]
    sc = sc + m.unsqueeze(1).float() if m.dtype != torch.bool else sc.masked_fill(~m.unsqueeze(1), float("-inf"))
    p = torch.softmax(sc, dim=-1).view(b, hk, g * q, s)
    out = (p @ value.float()).view(b, hq, q, d).to(query.dtype)
    return out.transpose(1, 2).contiguous(), None
if os.environ.get("ATTN") == "math":
    C.gqa_sdpa = gqa_math
from fastforward.cli.common import load_models, generation_config
from fastforward.decoders.registry import build_decoder
from fastforward.data import render_prompt, load_dataset
from fastforward.core.engine import compile_forward
dt = sys.argv[1]
args = argparse.Namespace(model="smollm2-135m", dtype=dt, device="cpu", threads=2, path="default",
    compile="off", max_new_tokens=128, methods="ar", draft=None, fp32_logits=False, weights="full",
    temperature=0.0, top_k=0, top_p=1.0, seed=None, command="bench")
for k in ("json_schema","regex","choice","grammar","json_object"): setattr(args, k, None)
target, _ = load_models(args)
config = generation_config(args, target)
ps = [render_prompt(target.tokenizer, [{"role": "user", "content": s.turns[0]}]) for s in load_dataset("gsm8k", limit=2)]
d = build_decoder("ar", target, None, {})
eager = [d.generate(p, config).tokens for p in ps]
compile_forward(target.model, 1024, mode="max-autotune", store=None)
d = build_decoder("ar", target, None, {})
t=time.time(); d.generate(ps[0], replace(config, max_new_tokens=8)); print("compile+warm", round(time.time()-t,1), flush=True)
w=n=0; same=[]
for rep in range(2):
    for p, e in zip(ps, eager):
        r = d.generate(p, config); w += r.stats.wall_time_s; n += len(r.tokens); same.append(list(r.tokens)==list(e))
print(os.environ.get("ATTN"), os.environ.get("GEMM"), dt, "tok/s", round(n/w,1), "same as eager", same, flush=True)

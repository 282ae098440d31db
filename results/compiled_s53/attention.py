"""Per-layer attention variants, compiled alone: ms per call and whether a row's output has the same bits
in a q-row call as in a 1-row call (the row's visible prefix equal). python attn.py HQ HKV D S"""

import sys
import time

import torch
from torch._inductor import config

import fastforward.core.compiled as C

torch.set_num_threads(2)
config.freezing = True
config.cpp.min_chunk_size = 2048
hq, hkv, d, S = (int(a) for a in sys.argv[1:5])
g = hq // hkv


def rowwise_split(query, key, value, mask, scaling=None):
    b, hq, q, d = query.shape
    hkv, s = key.shape[1], key.shape[2]
    g = hq // hkv
    scale = d**-0.5 if scaling is None else scaling
    visible = mask.expand(b, 1, q, s).unsqueeze(1)
    keys = key.float()[:, :, None, None]
    rows = query.reshape(b, hkv, g, q, 1, d).float()
    scores = ((rows * keys).sum(-1) * scale).masked_fill(~visible, torch.finfo(torch.float32).min)
    weights = torch.exp(scores - scores.amax(-1, keepdim=True))
    out = (weights.unsqueeze(-1) * value.float()[:, :, None, None]).sum(-2)
    return (out / weights.sum(-1, keepdim=True)).reshape(b, hq, q, d)


def rowwise_t(query, key, value, mask, scaling=None):
    """scores summed over d with slots innermost (keys read transposed)"""
    b, hq, q, d = query.shape
    hkv, s = key.shape[1], key.shape[2]
    g = hq // hkv
    scale = d**-0.5 if scaling is None else scaling
    visible = mask.expand(b, 1, q, s).unsqueeze(1)
    kt = key.float().transpose(-1, -2)[:, :, None, None]  # [b,hkv,1,1,d,s]
    rows = query.reshape(b, hkv, g, q, d, 1).float()
    scores = ((rows * kt).sum(-2) * scale).masked_fill(~visible, torch.finfo(torch.float32).min)
    weights = torch.exp(scores - scores.amax(-1, keepdim=True))
    out = (weights.unsqueeze(-1) * value.float()[:, :, None, None]).sum(-2)
    return (out / weights.sum(-1, keepdim=True)).reshape(b, hq, q, d)


V = {
    "rowwise": C.rowwise_attention,
    "transposed": rowwise_t,
    "rowwise2": C.rowwise_attention,
    "grouped": C.grouped_attention,
}
torch.manual_seed(0)
at = 300
key = torch.randn(1, hkv, S, d)
value = torch.randn(1, hkv, S, d)
qall = torch.randn(1, hq, 8, d)
for name, fn in V.items():
    outs = {}
    for q in (1, 4, 8):
        query = qall[:, :, :q].contiguous()
        mask = (torch.arange(S)[None, :] <= torch.arange(at, at + q)[:, None])[None, None]
        f = torch.compile(fn, dynamic=False)
        with torch.no_grad():
            for _ in range(3):
                f(query, key, value, mask)
            t = time.perf_counter()
            for _ in range(300):
                o = f(query, key, value, mask)
        outs[q] = o
        print(f"{name:10s} q={q}: {(time.perf_counter() - t) / 300 * 1e3:.3f} ms", end="  ", flush=True)
    same = all(torch.equal(outs[q][:, :, 0], outs[1][:, :, 0]) for q in (4, 8))
    print(f"row 0 same bits at q=4,8 as q=1: {same}", flush=True)

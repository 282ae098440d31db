"""Attention alone as attbench.py, the softmax's denominator as a matmul with ones: a 2-D block of ones
(broadcast; the templates take no such matmul), a batched one (what 83eedb7 runs) and ones concatenated to the
values. `python results/compiled_s57/att2.py grouped,ones2d,ones4d,cat 1,8` (grouped: the code before 83eedb7)."""
import sys, torch
from fastforward.core.compiled import grouped_attention
from attbench import run  # the same shapes and timing loop
def pre(query, key, value, mask):
    b, hq, q, d = query.shape; hkv, s = key.shape[1], key.shape[2]; g = hq // hkv
    scores = (query.reshape(b, hkv, g * q, d) @ key.transpose(-1, -2)).view(b, hkv, g, q, s) * d**-0.5
    scores = scores.masked_fill(~mask.unsqueeze(1), float("-inf"))
    w = torch.exp(scores - scores.amax(-1, keepdim=True)).view(b, hkv, g * q, s)
    return w, b, hq, q, d, s, hkv
def ones2d(query, key, value, mask, scaling=None):
    w, b, hq, q, d, s, hkv = pre(query, key, value, mask)
    tot = (w @ torch.ones(s, 16))[..., :1]
    return ((w @ value) / tot).view(b, hq, q, d)
def ones4d(query, key, value, mask, scaling=None):
    w, b, hq, q, d, s, hkv = pre(query, key, value, mask)
    tot = (w @ torch.ones(b, hkv, s, 16))[..., :1]
    return ((w @ value) / tot).view(b, hq, q, d)
def cat(query, key, value, mask, scaling=None):
    w, b, hq, q, d, s, hkv = pre(query, key, value, mask)
    o = w @ torch.cat([value, torch.ones(b, hkv, s, 16)], -1)
    return (o[..., :d] / o[..., d:d + 1]).view(b, hq, q, d)
fns = dict(grouped=grouped_attention, ones2d=ones2d, ones4d=ones4d, cat=cat)
run(fns, sys.argv[1].split(","), [int(x) for x in sys.argv[2].split(",")])

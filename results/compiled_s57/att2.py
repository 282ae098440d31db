"""Attention alone as attbench.py, the softmax's denominator as a matmul with ones: a 2-D block of ones
(broadcast; the templates take no such matmul), a batched one (what 83eedb7 runs) and ones concatenated to the
values. `python results/compiled_s57/att2.py grouped,ones2d,ones4d,cat 1,8` (grouped: the code before 83eedb7)."""
import sys, time, torch
from fastforward.core.compiled import grouped_attention
torch.set_num_threads(2)
b, hq, hkv, d, S, ctx = 1, 9, 3, 64, 512, 200
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
names = sys.argv[1].split(","); ks = [int(x) for x in sys.argv[2].split(",")]
for k in ks:
    torch.manual_seed(0)
    q = torch.randn(b, hq, k, d); K = torch.randn(b, hkv, S, d); V = torch.randn(b, hkv, S, d)
    mask = torch.zeros(b, 1, k, S, dtype=torch.bool); mask[..., : ctx + 1] = True
    ref = grouped_attention(q, K, V, mask)
    for n in names:
        f = torch.compile(fns[n], fullgraph=True, options={"max_autotune": True, "max_autotune_gemm_backends": "CPP"})
        try:
            with torch.no_grad():
                out = f(q, K, V, mask)
                err = (out - ref).abs().max().item()
                for _ in range(50): f(q, K, V, mask)
                ts = []
                for r in range(7):
                    t = time.perf_counter()
                    for _ in range(300): f(q, K, V, mask)
                    ts.append((time.perf_counter() - t) / 300 * 1e6)
            ts.sort()
            print(f"k={k} {n:9s} {ts[3]:7.1f} us/call (min {ts[0]:.1f})  maxerr {err:.2e}", flush=True)
        except Exception as e:
            print(f"k={k} {n:9s} FAILED {type(e).__name__}: {str(e)[:120]}", flush=True)

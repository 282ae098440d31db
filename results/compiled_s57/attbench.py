"""Attention alone, compiled as the packages compile it (CPP GEMM templates, freezing), SmolLM2 shapes:
9 query heads on 3 kv heads, head dim 64, 512 cache slots, 200 visible; k query rows. us per call x30 layers."""
import sys, time, torch
import torch._inductor.config as ic
from fastforward.core.compiled import grouped_attention
torch.set_num_threads(2)
b, hq, hkv, d, S, ctx = 1, 9, 3, 64, 512, 200
def reduce_att(query, key, value, mask, scaling=None):
    b, hq, q, d = query.shape; hkv, s = key.shape[1], key.shape[2]; g = hq // hkv
    qq = query.reshape(b, hkv, g * q, 1, d)
    scores = (qq * key[:, :, None]).sum(-1).view(b, hkv, g, q, s) * d**-0.5
    scores = scores.masked_fill(~mask.unsqueeze(1), float("-inf"))
    probs = torch.softmax(scores, -1).view(b, hkv, g * q, s, 1)
    return (probs * value[:, :, None]).sum(-2).view(b, hq, q, d)
def keymajor(query, key, value, mask, scaling=None):
    b, hq, q, d = query.shape; hkv, s = key.shape[1], key.shape[2]; g = hq // hkv
    scores = (key @ query.reshape(b, hkv, g * q, d).transpose(-1, -2)).transpose(-1, -2).reshape(b, hkv, g, q, s) * d**-0.5
    scores = scores.masked_fill(~mask.unsqueeze(1), float("-inf"))
    probs = torch.softmax(scores, -1).view(b, hkv, g * q, s)
    return (probs @ value).view(b, hq, q, d)
def sdpa(query, key, value, mask, scaling=None):
    return torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=mask, enable_gqa=True)
fns = dict(grouped=grouped_attention, reduce=reduce_att, keymajor=keymajor, sdpa=sdpa)

def run(fns, names, ks):
    """Each of ``fns`` named in ``names``, compiled on the templates alone, timed at each of ``ks`` query rows
    against grouped_attention's output; a function the templates cannot compile is reported, not fatal."""
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
            except Exception as e:
                print(f"k={k} {n:9s} FAILED {type(e).__name__}: {str(e)[:120]}", flush=True)
                continue
            ts.sort()
            print(f"k={k} {n:9s} {ts[3]:7.1f} us/call (min {ts[0]:.1f})  x30 = {ts[3]*30/1e3:.2f} ms  maxerr {err:.2e}", flush=True)


if __name__ == "__main__":
    run(fns, sys.argv[1].split(","), [int(x) for x in sys.argv[2].split(",")])

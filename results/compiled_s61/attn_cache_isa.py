import torch
from fastforward.core.compiled import rowwise_attention
import fastforward.core.aot, fastforward.core.engine, fastforward.models.loading
torch.manual_seed(2)
q, n, d, s = 4, 300, 64, 512
attend = torch.compile(rowwise_attention, dynamic=False)
query, key, value = torch.randn(1, 9, q, d), torch.randn(1, 3, s, d), torch.randn(1, 3, s, d)
with torch.no_grad():
    m = (torch.arange(s) <= n + 1).repeat(q, 1)[None, None]
    ar = attend(query, key, value, m)
    for between in range(1, 4):
        k2, v2 = torch.randn(1, 3, s, d), torch.randn(1, 3, s, d)
        k2[:, :, : n + 1], v2[:, :, : n + 1] = key[:, :, : n + 1], value[:, :, : n + 1]
        k2[:, :, n + 1 + between], v2[:, :, n + 1 + between] = key[:, :, n + 1], value[:, :, n + 1]
        mask = (torch.arange(s) <= n).repeat(q, 1)
        mask[:, n + 1 + between] = True
        c = attend(query, k2, v2, mask[None, None]); e = rowwise_attention(query, k2, v2, mask[None, None])
        bad = ~torch.isclose(c, e, atol=1e-4)
        print(between, "bad", bad.sum().item(), "equal-ar", torch.equal(c, ar), "eager-vs-ar maxdiff", (e-ar).abs().max().item())
        idx = bad.nonzero()
        if len(idx): print("  last-dim", sorted(set(idx[:, -1].tolist()))[:70], "rows", sorted(set(idx[:,2].tolist())), "heads", sorted(set(idx[:,1].tolist())))

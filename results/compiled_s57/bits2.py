import sys, torch
from fastforward.core.compiled import inductor_cache
from fastforward.core.engine import ModelEngine, compile_forward, Block
from fastforward.models.cache import cache_root, compiled_dir
from fastforward.models.loading import load_model
inductor_cache(str(cache_root()))
lm = load_model("smollm2-135m", "float32", path="default", threads=2)
runner = compile_forward(lm.model, store=compiled_dir())
engine = ModelEngine(lm.model)
ctx = 200
toks = [(1030 + 37 * i) % 49152 for i in range(32)]
with torch.inference_mode():
    engine.start(torch.arange(100, 100 + ctx)[None], capacity=ctx + 100)
    one = []
    for t in toks:
        one.append(engine.forward([Block.chain([t])]).logits[0][-1].clone()); engine.keep([[0]])
    for w in (2, 4, 8, 16, 32):
        engine.truncate(0, ctx)
        wide = engine.forward([Block.chain(toks[:w])]).logits[0]
        same = sum(torch.equal(wide[i], one[i]) for i in range(w))
        print(f"width {w}: {same}/{w} positions bit-identical to the 1-token steps; max diff {(wide - torch.stack(one[:w])).abs().max().item():.2e}", flush=True)
    for w in (4, 8):
        engine.truncate(0, ctx)
        # a tree: node0 = toks[0]; node1 = sibling (50, child of 0's parent? -> child of root); node2 = toks[1] child of node0
        tree = engine.forward([Block([toks[0], 50, toks[1]] + [60] * (w - 3), [-1, 0, 0] + [1] * (w - 3))]).logits[0]
        print(f"tree in width {w}: node0 {torch.equal(tree[0], one[0])}, node2 {torch.equal(tree[2], one[1])} (diff {(tree[2]-one[1]).abs().max().item():.2e})", flush=True)
    print("ran", engine.ran, sorted(runner.used))

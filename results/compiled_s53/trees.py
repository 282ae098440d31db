"""Tree node vs its AR step bits, compiled, real model. python treeprobe.py REF WEIGHTS"""
import sys
import torch
from fastforward.core.engine import Block, ModelEngine, compile_forward
from fastforward.models.cache import compiled_dir
from fastforward.models.loading import load_model

ref, weights = sys.argv[1], sys.argv[2]
lm = load_model(ref, "float32", path="default", threads=2, weights=weights)
compile_forward(lm.model, store=compiled_dir(), widths=(1, 4, 8))
engine = ModelEngine(lm.model)
prompt = lm.tokenizer("Write a Python function that returns the n-th Fibonacci number.", return_tensors="pt").input_ids
text = lm.tokenizer(" def fib(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a", add_special_tokens=False).input_ids
with torch.inference_mode():
    engine.start(prompt, capacity=prompt.shape[1] + 64)
    n0 = prompt.shape[1]
    steps = []
    for t in text[:4]:
        steps.append(engine.forward([Block.chain([t])]).logits[0][-1].clone())
        engine.keep([[0]])
    engine.truncate(0, n0)
    for sib in range(1, 4):  # the node's siblings before it: 1, 2, 3 hidden slots between
        toks = [text[0]] + [text[3]] * sib + [text[1]]
        parents = [-1] + [0] * (sib + 1)
        tree = engine.forward([Block(toks, parents)]).logits[0].clone()
        engine.truncate(0, n0)
        d0 = (tree[0] - steps[0]).abs().max().item()
        d1 = (tree[-1] - steps[1]).abs().max().item()
        print(f"{ref} {weights} tree with {sib} sibling(s) between: root {d0:.3g}, node {d1:.3g}", flush=True)

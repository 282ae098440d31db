"""Width probe on a truncated model: does a k-token chain give each token its 1-token bits (compiled)?
python probe.py REF WEIGHTS LAYERS STORE [MIN_CHUNK]"""

import sys
import time
from pathlib import Path

import torch

from fastforward.core.engine import Block, ModelEngine, compile_forward
from fastforward.models.loading import load_model

ref, weights, layers, store = sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
if len(sys.argv) > 5:
    torch._inductor.config.cpp.min_chunk_size = int(sys.argv[5])
lm = load_model(ref, "float32", path="default", threads=2, weights=weights)
m = lm.model
if layers:
    m.model.layers = m.model.layers[:layers]
    m.config.num_hidden_layers = layers
    if hasattr(m.config, "layer_types") and m.config.layer_types:
        m.config.layer_types = m.config.layer_types[:layers]
t0 = time.time()
compile_forward(m, store=store, widths=(1, 4, 8))
engine = ModelEngine(m)
prompt = lm.tokenizer(
    "Write a Python function that returns the n-th Fibonacci number.", return_tensors="pt"
).input_ids
text = lm.tokenizer(
    " def fib(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a",
    add_special_tokens=False,
).input_ids
widths = [4, 8]
with torch.inference_mode():
    engine.start(prompt, capacity=prompt.shape[1] + 64)
    n0 = prompt.shape[1]
    steps = []
    for t in text[: max(widths)]:
        steps.append(engine.forward([Block.chain([t])]).logits[0][-1].clone())
        engine.keep([[0]])
    engine.truncate(0, n0)
    for k in widths:
        wide = engine.forward([Block.chain(text[:k])]).logits[0].clone()
        engine.truncate(0, n0)
        diff = max((wide[i] - steps[i]).abs().max().item() for i in range(k))
        print(
            f"{ref} {weights} layers={layers} k={k}: max |logit diff| {diff:.3g} ({time.time() - t0:.0f}s)",
            flush=True,
        )

"""Whether a token's logits have the same bits in a k-token chain forward as in 1-token steps, through the
engine (its static cache and 4D masks), eager or compiled: the max |difference| per width.

    PYTHONPATH=src .venv/bin/python results/compiled_s52/widths.py smollm2-135m w8a8 eager|compiled
"""

from __future__ import annotations

import sys

import torch

from fastforward.core.engine import Block, ModelEngine, compile_forward
from fastforward.models.cache import compiled_dir
from fastforward.models.loading import load_model


def main() -> None:
    ref, weights, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    widths = [int(w) for w in (sys.argv[4] if len(sys.argv) > 4 else "2,4,8").split(",")]
    lm = load_model(ref, "float32", path="default", threads=2, weights=weights)
    if mode == "compiled":
        compile_forward(lm.model, store=compiled_dir())
    engine = ModelEngine(lm.model)
    prompt = lm.tokenizer("Write a Python function that returns the n-th Fibonacci number.", return_tensors="pt").input_ids
    text = lm.tokenizer(" def fib(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a", add_special_tokens=False).input_ids
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
            same = sum(int(wide[i].argmax() == steps[i].argmax()) for i in range(k))
            print(f"{ref} {weights} {mode} k={k}: max |logit diff| {diff:.3g}, argmax equal {same}/{k}", flush=True)


if __name__ == "__main__":
    main()

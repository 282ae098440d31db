"""What rounding costs a model: the mean negative log-likelihood (and perplexity) of held-out GSM8K
solutions under the model at each --weights, teacher-forced, one forward per problem, in float32.

    PYTHONPATH=src .venv/bin/python results/compiled_s52/quality.py smollm2-135m 32 > out.json
"""

from __future__ import annotations

import json
import math
import sys

import torch

from fastforward.data import gsm8k
from fastforward.models.loading import load_model


def main() -> None:
    model_ref, n = sys.argv[1], int(sys.argv[2])
    kinds = sys.argv[3].split(",") if len(sys.argv) > 3 else ["full", "int8", "w8a8"]
    samples = [s for _, s in zip(range(n), gsm8k.load("heldout"))]
    out = {"model": model_ref, "problems": n, "split": "heldout", "dtype": "float32", "rows": {}}
    for kind in kinds:
        lm = load_model(model_ref, "float32", path="default", threads=2, weights=kind)
        tok, m = lm.tokenizer, lm.model
        nll, count = 0.0, 0
        for s in samples:
            q = tok(s.turns[0] + "\n", return_tensors="pt").input_ids
            a = tok(s.meta["solution"], return_tensors="pt", add_special_tokens=False).input_ids
            ids = torch.cat([q, a], 1)
            with torch.no_grad():
                logits = m(ids).logits[0, q.shape[1] - 1 : -1].float()
            nll += torch.nn.functional.cross_entropy(logits, a[0], reduction="sum").item()
            count += a.shape[1]
        out["rows"][kind] = {"nll": round(nll / count, 5), "ppl": round(math.exp(nll / count), 4), "tokens": count}
        print(kind, out["rows"][kind], file=sys.stderr, flush=True)
        del lm, m
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

"""What a k-token x batch-B verify forward costs, relative to one AR step at the same batch size.

Speculation pays at batch B only when a forward over k tokens per row costs less than the tokens it
commits per row would cost as AR steps: ``speedup ~= tokens_per_forward * cost(B, 1) / cost(B, k)``. This
measures ``cost(B, k)`` with the batched decoder's own inputs (ragged 4D mask, per-row positions, a cache of
``--context`` slots per row) for each model and writes the table to ``results/batch_costs.json``.

    python scripts/batch_costs.py --model smollm2-135m --model qwen2.5-coder-1.5b --dtype bfloat16
    python scripts/batch_costs.py --model qwen2.5-coder-1.5b --path prepacked --out results/batch_costs_prepacked.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from fastforward import hardware
from fastforward.core.cache import new_cache, rollback
from fastforward.core.ragged import Block, block_inputs
from fastforward.models.loading import load_model


def forward_ms(model, batch: int, k: int, context: int, reps: int) -> float:
    cache = new_cache(model)
    g = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size
    with torch.inference_mode():
        model(input_ids=torch.randint(0, vocab, (batch, context), generator=g), past_key_values=cache,
              use_cache=True, logits_to_keep=1)  # fmt: skip
        lengths = [context - (i % 4) for i in range(batch)]  # ragged rows, as in a running batch
        blocks = [Block.chain(torch.randint(0, vocab, (k,), generator=g).tolist()) for _ in range(batch)]
        ids, pos, mask = block_inputs(model, lengths, blocks, context, 0, model.dtype, "cpu")
        times = []
        for _ in range(reps + 1):
            t0 = time.perf_counter()
            model(input_ids=ids, position_ids=pos, attention_mask=mask, past_key_values=cache, use_cache=True)
            times.append(time.perf_counter() - t0)
            rollback(cache, context)
    return statistics.median(times[1:]) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", action="append", required=True)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--batch", default="1,4,8,16")
    ap.add_argument("--k", default="1,2,4,8")
    ap.add_argument("--context", type=int, default=192)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--path", default="default", help="kernel path of the linear layers (default|prepacked)")
    ap.add_argument("--out", default="results/batch_costs.json")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    out = {
        "hardware": hardware.describe(),
        "context": a.context,
        "dtype": a.dtype,
        "path": a.path,
        "models": {},
    }
    for name in a.model:
        m = load_model(name, a.dtype, threads=a.threads, path=a.path).model
        table = {}
        for b in map(int, a.batch.split(",")):
            row = {k: forward_ms(m, b, k, a.context, a.reps) for k in map(int, a.k.split(","))}
            table[str(b)] = {"ms": row, "relative_to_k1": {k: v / row[1] for k, v in row.items()}}
            print(name, b, {k: round(v, 1) for k, v in row.items()}, flush=True)
        out["models"][name] = table
        del m
    Path(a.out).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()

"""What jacobi's Jacobi-Forcing options cost and give on a base model (issue 14, item 3): a measurement.

SmolLM2-135M in bfloat16, 4 GSM8K held-out prompts, 128 new tokens, block_size 16, for (pool_size,
max_blocks) in (0, 1), (2, 1), (0, 2), (2, 2): tokens per forward, mean tokens fed per decode forward, wall
tokens/s (AR alongside), and whether the tokens equal AR's; then the cost of one forward over k tokens after
a 150-token prompt (k = 1, 16, 32, 48, 64; median of 5, causal, and with a 4D mask as tree forwards pass).

Usage: python scripts/jacobi_options_cost.py [--threads 2] [--out results/jacobi_options_cost.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from fastforward.core.cache import new_cache, rollback
from fastforward.core.decoder import GenerationConfig
from fastforward.core.masks import tree_depths, tree_mask, tree_visibility
from fastforward.data import load_dataset, render_prompt
from fastforward.decoders.registry import build_decoder
from fastforward.models.loading import load_model

PROMPTS, NEW, BLOCK = 4, 128, 16
OPTIONS = [(0, 1), (2, 1), (0, 2), (2, 2)]  # (pool_size, max_blocks)
WIDTHS, REPS, CONTEXT = (1, 16, 32, 48, 64), 5, 150


class Widths:
    """Counts the tokens of every forward of a model (forward pre-hook)."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.sizes: list[int] = []
        model.register_forward_pre_hook(self._hook, with_kwargs=True)

    def _hook(self, _module, args, kwargs) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        self.sizes.append(int(ids.shape[1]))


def decode_rows(m, prompts: list[list[int]], widths: Widths) -> list[dict]:
    cfg = GenerationConfig(max_new_tokens=NEW, eos_token_ids=m.eos_token_ids)
    ar = build_decoder("ar", m, None, {})
    ar.generate(prompts[0][:32], GenerationConfig(8))  # warm-up
    start = time.perf_counter()
    want = [ar.generate(p, cfg).tokens for p in prompts]
    ar_s = time.perf_counter() - start
    rows = [{"method": "ar", "tok_per_forward": 1.0, "fed_per_forward": 1.0,
             "tok_s": round(sum(map(len, want)) / ar_s, 2), "same_as_ar": 1.0}]  # fmt: skip
    for pool, blocks in OPTIONS:
        dec = build_decoder("jacobi", m, None, {"block_size": BLOCK, "pool_size": pool, "max_blocks": blocks})
        tokens = forwards = fed = 0
        wall, same = 0.0, 0
        extras: dict[str, int] = {}
        for p, ref in zip(prompts, want, strict=True):
            widths.sizes.clear()
            out = dec.generate(p, cfg)
            decode = widths.sizes[1:]  # the prefill is the first forward
            tokens += out.stats.new_tokens
            forwards += out.stats.target_forwards
            fed += sum(decode)
            wall += out.stats.wall_time_s
            same += out.tokens == ref
            for k in ("pool_candidates", "recycled_tokens", "spawned_blocks"):
                extras[k] = extras.get(k, 0) + out.stats.extras.get(k, 0)
        rows.append(
            {
                "method": f"jacobi pool_size={pool} max_blocks={blocks}",
                "tok_per_forward": round(tokens / forwards, 3),
                "fed_per_forward": round(fed / (forwards - len(prompts)), 2),
                "tok_s": round(tokens / wall, 2),
                "same_as_ar": same / len(prompts),
                **extras,
            }
        )
        print(rows[-1], file=sys.stderr, flush=True)
    return rows


def forward_costs(m, prompt: list[int]) -> list[dict]:
    """Median seconds of one forward over k new tokens after a CONTEXT-token cached prompt."""
    model, dtype = m.model, next(m.model.parameters()).dtype
    ids = (prompt * (CONTEXT // len(prompt) + 1))[:CONTEXT]
    cache = new_cache(model)
    with torch.inference_mode():
        model(input_ids=torch.tensor([ids]), past_key_values=cache, use_cache=True, logits_to_keep=1)
        rows = []
        for k in WIDTHS:
            feed = torch.tensor([ids[:k]])
            pos = torch.arange(CONTEXT, CONTEXT + k)[None]
            parents = [i - 1 for i in range(k)]
            vis, depths = tree_visibility(parents), tree_depths(parents)
            row = {"k": k}
            for label, mask in (("causal", None), ("mask4d", True)):
                times = []
                for _ in range(REPS + 1):  # the first is a warm-up
                    start = time.perf_counter()
                    kw = {}
                    if mask:
                        kw["attention_mask"] = tree_mask(model, vis, depths, CONTEXT, dtype)
                    model(input_ids=feed, position_ids=pos, past_key_values=cache, use_cache=True, **kw)
                    times.append(time.perf_counter() - start)
                    rollback(cache, CONTEXT)
                row[f"{label}_ms"] = round(1000 * statistics.median(times[1:]), 2)
            rows.append(row)
    base = rows[0]["causal_ms"]
    for r in rows:
        r["vs_k1"] = round(r["causal_ms"] / base, 2)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    m = load_model("smollm2-135m", "bfloat16", threads=args.threads)
    torch.set_num_threads(args.threads)
    samples = load_dataset("gsm8k", PROMPTS)
    prompts = [render_prompt(m.tokenizer, [{"role": "user", "content": s.turns[0]}]) for s in samples]
    widths = Widths(m.model)
    result = {
        "model": "smollm2-135m bfloat16",
        "threads": args.threads,
        "prompts": f"{PROMPTS} gsm8k held-out",
        "max_new_tokens": NEW,
        "block_size": BLOCK,
        "decode": decode_rows(m, prompts, widths),
        "forward_cost": forward_costs(m, prompts[0]),
    }
    print("| method | tokens/forward | fed/forward | tok/s | same as AR | candidates | recycled | spawned |")
    print("|---|---|---|---|---|---|---|---|")
    for r in result["decode"]:
        extra = [r.get(k, "") for k in ("pool_candidates", "recycled_tokens", "spawned_blocks")]
        print(
            f"| {r['method']} | {r['tok_per_forward']} | {r['fed_per_forward']} | {r['tok_s']} | "
            f"{r['same_as_ar']} | " + " | ".join(map(str, extra)) + " |"
        )
    print(f"\nforward over k tokens after a {CONTEXT}-token prompt (median of {REPS}):")
    print("| k | causal ms | 4D-mask ms | causal vs k=1 |\n|---|---|---|---|")
    for r in result["forward_cost"]:
        print(f"| {r['k']} | {r['causal_ms']} | {r['mask4d_ms']} | {r['vs_k1']} |")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()

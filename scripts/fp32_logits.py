"""Agreement with AR of bf16 multi-token methods, native bf16 LM head vs --fp32-logits (issue 16 item 5).

Usage: python scripts/fp32_logits.py   (SmolLM2, 6 prompts x 48 tokens; writes results/fp32_logits.json)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from fastforward import hardware
from fastforward.core.decoder import GenerationConfig
from fastforward.data import load_dataset, render_prompt
from fastforward.decoders.registry import build_decoder
from fastforward.models.loading import load_model

N, T = 6, 48


def same(a: list[list[int]], b: list[list[int]]) -> float:
    return sum(x == y for x, y in zip(a, b, strict=True)) / len(a)


def main() -> None:
    out = {"hardware": hardware.describe(), "prompts": N, "max_new_tokens": T}
    out["command"] = "python scripts/fp32_logits.py"
    ref = load_model("smollm2-135m", "float32")
    samples = load_dataset("gsm8k", N // 2) + load_dataset("mtbench", N - N // 2)
    prompts = [render_prompt(ref.tokenizer, [{"role": "user", "content": s.turns[0]}]) for s in samples]
    cfg = GenerationConfig(max_new_tokens=T, eos_token_ids=ref.eos_token_ids)
    want32 = [build_decoder("ar", ref, None, {}).generate(p, cfg).tokens for p in prompts]
    for logits32 in (False, True):
        m = load_model("smollm2-135m", "bfloat16", logits32=logits32)
        ar = build_decoder("ar", m, None, {})
        ar.generate(prompts[0], cfg)  # warm-up
        start = time.perf_counter()
        want = [ar.generate(p, cfg).tokens for p in prompts]
        row = {"ar_tok_s": round(sum(map(len, want)) / (time.perf_counter() - start), 2)}
        row["ar_identical_to_fp32_ar"] = same(want, want32)
        for meth in ("pld", "lookahead"):
            dec = build_decoder(meth, m, None, {})
            got = [dec.generate(p, cfg).tokens for p in prompts]
            row[f"{meth}_identical_to_bf16_ar"] = same(got, want)
            row[f"{meth}_identical_to_fp32_ar"] = same(got, want32)
        out["fp32_head" if logits32 else "bf16_head"] = row
        print("fp32 head" if logits32 else "bf16 head", row, flush=True)
    Path("results/fp32_logits.json").write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()

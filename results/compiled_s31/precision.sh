#!/usr/bin/env bash
# Issue 32, session 31: compiled AR at other precisions beside llama.cpp at the same precision, same run
# (bf16 vs BF16, int8 weight-only (bf16 activations) vs Q8_0), GSM8K held-out, 3 prompts, 128 tokens.
set -euo pipefail
OUT=results/compiled_s31
run() {  # tag, then bench flags
  tag=$1; shift
  /usr/bin/time -f "wall_s %e" .venv/bin/fastforward bench --model smollm2-135m --dataset gsm8k --limit 3 \
    --max-new-tokens 128 --threads 2 --path auto --compile on --methods ar,ar_eager,hf_generate --llamacpp \
    "$@" --out "$OUT/precision_${tag}.json" 2> "$OUT/precision_${tag}.log"
}
run bf16 --dtype bfloat16
run int8 --dtype bfloat16 --weights int8

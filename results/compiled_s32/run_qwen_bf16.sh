#!/usr/bin/env bash
# Issue 32, session 32: the Qwen2.5-Coder-1.5B target in bf16 through the compiled engine (AR only: the
# 1-token package alone holds 3.5 GB of laid-out weights) beside llama.cpp's BF16 AR, same run.
set -euo pipefail
/usr/bin/time -f "wall_s %e" .venv/bin/fastforward bench --model qwen2.5-coder-1.5b --dataset humaneval \
  --limit 3 --max-new-tokens 128 --threads 2 --dtype bfloat16 --path auto --compile on --methods ar \
  --llamacpp --out results/compiled_s32/qwen15_bf16_humaneval_avx512.json \
  2> results/compiled_s32/qwen15_bf16_humaneval_avx512.log

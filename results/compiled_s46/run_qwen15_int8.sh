#!/usr/bin/env bash
# Issue 32, session 46 (2-vCPU AMD EPYC family 25 model 17, AVX-512 with bf16 and VNNI, no AMX, 32 MB L3): the
# Qwen2.5-Coder 1.5B target with int8 weights (bf16 activations; buckets of 1-4 tokens on inductor's templates,
# 8+ on ATen since this session) and its 0.5B draft (int8, compiled), beside llama.cpp's AR and its speculative
# decoding on the Q8_0 GGUFs, same run, LIMIT prompts, 128 tokens. Session 45's script with this session's code.
# Needs the native llama.cpp build and the Q8_0 GGUFs:
#   bash recipes/llamacpp.sh build
#   MODEL=qwen2.5-coder-1.5b KINDS=Q8_0 bash recipes/llamacpp.sh convert
#   MODEL=qwen2.5-coder-0.5b KINDS=Q8_0 bash recipes/llamacpp.sh convert
# Run from the repository root: bash results/compiled_s46/run_qwen15_int8.sh
set -euo pipefail
TAG=${TAG:-epyc}
OUT=${OUT:-results/compiled_s46}
for ds in ${DATASETS:-humaneval gsm8k}; do
  /usr/bin/time -f "wall_s %e maxrss_kb %M" .venv/bin/fastforward bench --model qwen2.5-coder-1.5b \
    --draft qwen2.5-coder-0.5b --dataset "$ds" --limit "${LIMIT:-3}" --max-new-tokens 128 --threads 2 \
    --dtype bfloat16 --weights int8 --path auto --compile on --methods "${METHODS:-ar,pld,suffix,sd,sd:model}" \
    --opt sd.draft_bits=8 --opt sd:model.draft_bits=8 --opt sd:model.lookup_first=false \
    --llamacpp "${LLAMACPP:-$HOME/.cache/fastforward/llamacpp}" --out "$OUT/qwen15_int8_${ds}_${TAG}.json" \
    2> "$OUT/qwen15_int8_${ds}_${TAG}.log"
done

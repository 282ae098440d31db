#!/usr/bin/env bash
# Issue 32, session 35 (2-vCPU AMX Xeon): the Qwen2.5-Coder 1.5B target with its 0.5B draft through the compiled engine, beside
# llama.cpp's AR and its speculative decoding on the same GGUFs at the same precision, same run.
# int8 weight-only (bf16 activations) against Q8_0: a package per width bucket holds its own copy of the
# weights (~1.9 GB each for the int8 1.5B), which fits this disk; fp32 (~7 GB per bucket) does not.
# The draft runs with int8 weights (draft_bits=8), compiled like the target since 4ac474b (files *_eagerdraft:
# before, with an eager draft), against llama.cpp's Q8_0 0.5B draft.
# Needs: bash recipes/llamacpp.sh build, then
#   MODEL=qwen2.5-coder-1.5b KINDS="Q8_0 BF16" bash recipes/llamacpp.sh convert
#   MODEL=qwen2.5-coder-0.5b KINDS="Q8_0 BF16" bash recipes/llamacpp.sh convert
# Session 35: this VM lists AMX, and llama.cpp's native build crashed on Q8_0 weights in its AMX path (F32 ran),
# so the reference here is the AVX-512 build without AMX:
#   ISA=avx512 bash recipes/llamacpp.sh build; ISA=avx512 MODEL=... KINDS=Q8_0 bash recipes/llamacpp.sh convert
#   LLAMACPP=~/.cache/fastforward/llamacpp-avx512 bash results/compiled_s35/run_qwen.sh
set -euo pipefail
TAG=${TAG:-amx}
OUT=${OUT:-results/compiled_s35}
for ds in ${DATASETS:-humaneval gsm8k}; do
  /usr/bin/time -f "wall_s %e" .venv/bin/fastforward bench --model qwen2.5-coder-1.5b \
    --draft qwen2.5-coder-0.5b --dataset "$ds" --limit ${LIMIT:-3} --max-new-tokens 128 --threads 2 \
    --dtype bfloat16 --weights int8 --path auto --compile on --methods ${METHODS:-ar,pld,suffix,sd} \
    --opt sd.draft_bits=8 --llamacpp ${LLAMACPP:-} --out "$OUT/qwen15_int8_${ds}_${TAG}.json" \
    2> "$OUT/qwen15_int8_${ds}_${TAG}.log"
done

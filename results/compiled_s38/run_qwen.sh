#!/usr/bin/env bash
# Issue 32, session 38 (2-vCPU AMX Xeon): the Qwen2.5-Coder 1.5B target (int8 weights, bf16 activations) with
# its int8 0.5B draft through the compiled engine, now that int8/int4 bf16 GEMMs go to inductor's templates
# (AMX micro-kernels) where AMX runs (core/compiled.py gemm_backends), beside llama.cpp's AR and its
# speculative decoding on the same GGUFs at Q8_0, same run. Same command as results/compiled_s35/run_qwen.sh
# (then the int8 GEMMs ran on ATen) but for OUT.
# Needs the AVX-512 llama.cpp build (its native build crashed on Q8_0 in its AMX path on this VM, session 35):
#   ISA=avx512 bash recipes/llamacpp.sh build
#   ISA=avx512 MODEL=qwen2.5-coder-1.5b KINDS=Q8_0 bash recipes/llamacpp.sh convert   # and qwen2.5-coder-0.5b
#   LLAMACPP=~/.cache/fastforward/llamacpp-avx512 bash results/compiled_s38/run_qwen.sh
set -euo pipefail
TAG=${TAG:-amx}
OUT=${OUT:-results/compiled_s38}
FF=${FF:-.venv/bin/fastforward}
for ds in ${DATASETS:-gsm8k humaneval}; do
  /usr/bin/time -f "wall_s %e" $FF bench --model qwen2.5-coder-1.5b \
    --draft qwen2.5-coder-0.5b --dataset "$ds" --limit ${LIMIT:-3} --max-new-tokens 128 --threads 2 \
    --dtype bfloat16 --weights int8 --path auto --compile on --methods ${METHODS:-ar,pld,suffix,sd} \
    --opt sd.draft_bits=8 --llamacpp ${LLAMACPP:-} --out "$OUT/qwen15_int8_${ds}_${TAG}.json" \
    2> "$OUT/qwen15_int8_${ds}_${TAG}.log"
done

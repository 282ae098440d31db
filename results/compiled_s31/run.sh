#!/usr/bin/env bash
# Issue 32, session 31 (decoding-width attention as grouped matmuls; oneDNN GEMMs for bf16): SmolLM2 fp32 through the compiled engine (AOTInductor packages) beside eager AR,
# generate() and llama.cpp F32, 128 tokens, one process per dataset. Cold compiles land in the first run.
# For the AVX2 cap: TAG=avx2cap ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 bash results/compiled_s31/run.sh
set -euo pipefail
TAG=${TAG:-avx512}
OUT=results/compiled_s31
for ds in ${DATASETS:-mtbench gsm8k humaneval}; do
  /usr/bin/time -f "wall_s %e" .venv/bin/fastforward bench --model smollm2-135m --dataset "$ds" --limit 3 \
    --max-new-tokens 128 --threads 2 --dtype float32 --path auto --compile on --methods all --llamacpp \
    --out "$OUT/bench_${ds}_${TAG}.json" 2> "$OUT/bench_${ds}_${TAG}.log"
done
# Then a longer HumanEval run (8 prompts) of the methods the 3-prompt run put below compiled AR, and the
# other precisions (bash results/compiled_s31/precision.sh):
#   fastforward bench --model smollm2-135m --dataset humaneval --limit 8 --max-new-tokens 128 --threads 2 \
#     --dtype float32 --path auto --compile on --methods ar,jacobi,lookahead,layerskip,qsd,suffix,pld,recycle \
#     --out results/compiled_s31/bench_humaneval8_avx512.json

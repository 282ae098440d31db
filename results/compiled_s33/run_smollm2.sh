#!/usr/bin/env bash
# Issue 32, session 33, on the first Intel Xeon with AMX this issue has run on: SmolLM2 through the compiled
# engine beside eager AR, generate() and llama.cpp at the same precision (F32 for fp32, BF16 for bf16), 128
# tokens, 3 prompts, one process per dataset. Cold compiles land in the first dataset's run (warm-up, not timed).
#   DTYPE=float32 TAG=amx_fp32 bash results/compiled_s33/run_smollm2.sh
#   DTYPE=bfloat16 TAG=amx_bf16 bash results/compiled_s33/run_smollm2.sh
#   AVX2 cap: DTYPE=float32 TAG=avx2cap_fp32 ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 bash ...
set -euo pipefail
DTYPE=${DTYPE:-float32}
TAG=${TAG:-amx_fp32}
OUT=results/compiled_s33
for ds in ${DATASETS:-mtbench gsm8k humaneval}; do
  /usr/bin/time -f "wall_s %e" .venv/bin/fastforward bench --model smollm2-135m --dataset "$ds" --limit 3 \
    --max-new-tokens 128 --threads 2 --dtype "$DTYPE" --path auto --compile on --methods all --llamacpp \
    --out "$OUT/bench_${ds}_${TAG}.json" 2> "$OUT/bench_${ds}_${TAG}.log"
done

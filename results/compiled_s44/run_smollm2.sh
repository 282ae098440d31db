#!/usr/bin/env bash
# Issue 32, session 44 (2-vCPU AMD EPYC family 25 model 17, AVX-512 with bf16, no AMX): SmolLM2 through the
# compiled engine, every method, beside eager AR and llama.cpp at the same precision (native build:
# bash recipes/llamacpp.sh build && bash recipes/llamacpp.sh convert), 128 tokens, LIMIT prompts a dataset,
# one process per dataset. Run from the repository root:
#   bash results/compiled_s44/run_smollm2.sh                      # float32, llama.cpp F32
#   DTYPE=bfloat16 TAG=epyc_bf16 bash results/compiled_s44/run_smollm2.sh   # bf16, llama.cpp BF16
set -euo pipefail
DTYPE=${DTYPE:-float32}
TAG=${TAG:-epyc_fp32_8p}
PY=${PY:-.venv/bin/python}
OUT=${OUT:-results/compiled_s44}
for ds in ${DATASETS:-mtbench gsm8k humaneval}; do
  /usr/bin/time -f "wall_s %e" "$PY" -m fastforward bench --model smollm2-135m --dataset "$ds" --limit "${LIMIT:-8}" \
    --max-new-tokens 128 --threads 2 --dtype "$DTYPE" --path auto --compile on --methods "${METHODS:-ar,jacobi,lookahead,suffix,recycle,pld,layerskip,qsd}" \
    --llamacpp ${LLAMACPP:-~/.cache/fastforward/llamacpp} --out "$OUT/bench_${ds}_${TAG}.json" 2> "$OUT/bench_${ds}_${TAG}.log"
done

#!/usr/bin/env bash
# Issue 32, session 53 (2-vCPU Intel Xeon, Ice Lake: AVX-512 with VNNI, no avx512_bf16, no AMX): SmolLM2 with
# --weights w8a8 through the compiled engine, every method that runs on a quantized target, beside llama.cpp
# Q8_0 (bash recipes/llamacpp.sh build && bash recipes/llamacpp.sh convert), 128 tokens, LIMIT prompts a
# dataset, one process per dataset. Run from the repository root.
set -euo pipefail
PY=${PY:-.venv/bin/python}
OUT=${OUT:-results/compiled_s53}
TAG=${TAG:-icx_w8a8_8p}
for ds in ${DATASETS:-mtbench gsm8k humaneval}; do
  /usr/bin/time -f "wall_s %e" "$PY" -m fastforward bench --model smollm2-135m --dataset "$ds" --limit "${LIMIT:-8}" \
    --max-new-tokens 128 --threads 2 --dtype float32 --weights w8a8 --path auto --compile on \
    --methods "${METHODS:-ar,jacobi,lookahead,suffix,recycle,pld,layerskip}" \
    --llamacpp ${LLAMACPP:-~/.cache/fastforward/llamacpp} --out "$OUT/bench_${ds}_${TAG}.json" 2> "$OUT/bench_${ds}_${TAG}.log"
done

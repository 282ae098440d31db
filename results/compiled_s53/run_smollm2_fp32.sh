#!/usr/bin/env bash
# Issue 32, session 53 (2-vCPU Intel Xeon, Ice Lake: AVX-512 with VNNI, no avx512_bf16, no AMX): SmolLM2 in float32
# (full weights) through the compiled engine beside llama.cpp F32 (bash recipes/llamacpp.sh build && bash
# recipes/llamacpp.sh convert), 128 tokens, LIMIT prompts, one process per dataset. Run from the repository root.
set -euo pipefail
PY=${PY:-.venv/bin/python}
OUT=${OUT:-results/compiled_s53}
for ds in ${DATASETS:-mtbench}; do
  /usr/bin/time -f "wall_s %e" "$PY" -m fastforward bench --model smollm2-135m --dataset "$ds" --limit "${LIMIT:-8}" \
    --max-new-tokens 128 --threads 2 --dtype float32 --path auto --compile on \
    --methods "${METHODS:-ar,suffix,pld,qsd}" \
    --llamacpp ${LLAMACPP:-~/.cache/fastforward/llamacpp} --out "$OUT/bench_${ds}_icx_fp32_8p.json" 2> "$OUT/bench_${ds}_icx_fp32_8p.log"
done

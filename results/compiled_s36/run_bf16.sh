#!/usr/bin/env bash
# Issue 32, session 36 (2-vCPU AMX Xeon): SmolLM2 bf16 through the compiled engine, its GEMMs on inductor's
# templates (AMX micro-kernels: core/compiled.py gemm_backends), every method beside eager AR, generate() and
# llama.cpp BF16 (its AVX-512 build without AMX: ISA=avx512 bash recipes/llamacpp.sh build; the native build
# dies on this VM); 128 tokens, 3 prompts, one process per dataset. Run from the repository root; PY picks the
# interpreter (PYTHONPATH=src for a worktree).
#   bash results/compiled_s36/run_bf16.sh
set -euo pipefail
TAG=${TAG:-amx_bf16}
PY=${PY:-.venv/bin/python}
OUT=results/compiled_s36
for ds in ${DATASETS:-mtbench gsm8k humaneval}; do
  /usr/bin/time -f "wall_s %e" "$PY" -m fastforward bench --model smollm2-135m --dataset "$ds" --limit 3 \
    --max-new-tokens 128 --threads 2 --dtype bfloat16 --path auto --compile on --methods ${METHODS:-all} \
    --llamacpp ${LLAMACPP:-$HOME/.cache/fastforward/llamacpp-avx512} \
    --out "$OUT/bench_${ds}_${TAG}.json" 2> "$OUT/bench_${ds}_${TAG}.log"
done

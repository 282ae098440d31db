#!/usr/bin/env bash
# Issue 32, session 35 (2-vCPU AMX Xeon): SmolLM2 fp32 through the compiled engine (buckets share
# one copy of the weights; qsd drafts on the target's cache), beside eager AR, generate() and llama.cpp F32; 128 tokens, 3 prompts, one process
# per dataset. Run from the repository root; PY picks the interpreter (PYTHONPATH=src for a worktree).
#   TAG=amx_fp32 bash results/compiled_s35/run_smollm2.sh
# Under the AVX2 cap, beside llama.cpp built for AVX2 only (ISA=avx2 bash recipes/llamacpp.sh build; convert):
#   TAG=avx2cap ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 LLAMACPP=~/.cache/fastforward/llamacpp-avx2 \
#     bash results/compiled_s35/run_smollm2.sh
set -euo pipefail
TAG=${TAG:-amx_fp32}
PY=${PY:-.venv/bin/python}
OUT=${OUT:-results/compiled_s35}
LLAMA=(--llamacpp ${LLAMACPP:-})
if [ -n "${NO_LLAMACPP:-}" ]; then LLAMA=(); fi  # our engine only
# LIMIT (default 3) prompts per dataset, METHODS (default all) the rows: e.g. LIMIT=8 for a longer run
for ds in ${DATASETS:-mtbench gsm8k humaneval}; do
  /usr/bin/time -f "wall_s %e" "$PY" -m fastforward bench --model smollm2-135m --dataset "$ds" --limit "${LIMIT:-3}" \
    --max-new-tokens 128 --threads 2 --dtype float32 --path auto --compile on --methods "${METHODS:-all}" "${LLAMA[@]}" \
    --out "$OUT/bench_${ds}_${TAG}.json" 2> "$OUT/bench_${ds}_${TAG}.log"
done

#!/usr/bin/env bash
# Issue 32, session 32 (drafts compiled with their target: qsd's int8 copy and layerskip's layer view step
# through their own compiled 1-token graph): SmolLM2 fp32 through the compiled engine beside eager AR,
# generate() and llama.cpp F32, 128 tokens, 3 prompts, one process per dataset. Cold compiles land in the
# first run. For the AVX2 cap: TAG=avx2cap ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 bash results/compiled_s32/run_smollm2.sh
set -euo pipefail
TAG=${TAG:-avx512}
OUT=results/compiled_s32
for ds in ${DATASETS:-mtbench gsm8k humaneval}; do
  /usr/bin/time -f "wall_s %e" .venv/bin/fastforward bench --model smollm2-135m --dataset "$ds" --limit 3 \
    --max-new-tokens 128 --threads 2 --dtype float32 --path auto --compile on --methods all --llamacpp \
    --out "$OUT/bench_${ds}_${TAG}.json" 2> "$OUT/bench_${ds}_${TAG}.log"
done

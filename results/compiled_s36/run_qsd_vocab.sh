#!/usr/bin/env bash
# Issue 32, session 36 (2-vCPU AMX Xeon): qsd with a reduced-vocabulary head inside its int8 copy (vocab=K,
# head_inside: the copy still drafts through its compiled 1-token graph on the target's cache), beside qsd
# with the whole vocabulary and compiled AR; SmolLM2 fp32, 128 tokens, 3 prompts, one process per dataset.
#   bash results/compiled_s36/run_qsd_vocab.sh
set -euo pipefail
TAG=${TAG:-amx_fp32}
PY=${PY:-.venv/bin/python}
OUT=results/compiled_s36
for ds in ${DATASETS:-humaneval mtbench gsm8k}; do
  /usr/bin/time -f "wall_s %e" "$PY" -m fastforward bench --model smollm2-135m --dataset "$ds" --limit 3 \
    --max-new-tokens 128 --threads 2 --dtype float32 --path auto --compile on \
    --methods ar,qsd,qsd:v16k,qsd:v8k --opt qsd:v16k.vocab=16384 --opt qsd:v8k.vocab=8192 \
    --out "$OUT/qsd_vocab_${ds}_${TAG}.json" 2> "$OUT/qsd_vocab_${ds}_${TAG}.log"
done

#!/usr/bin/env bash
# Issue 32, session 53 (2-vCPU Intel Xeon, Ice Lake: AVX-512 with VNNI, no avx512_bf16, no AMX): the 1.5B pair
# with --weights w8a8 (target) and a W8A8 0.5B draft (sd.draft_bits=8, sd.act8), graphs for widths 1, 4 and 8,
# beside llama.cpp Q8_0's AR and its speculative decoding with the 0.5B Q8_0 draft
# (bash recipes/llamacpp.sh build && for m in qwen2.5-coder-1.5b qwen2.5-coder-0.5b; do MODEL=$m KINDS=Q8_0
# bash recipes/llamacpp.sh convert; done), 128 tokens, LIMIT prompts, one process per dataset.
set -euo pipefail
PY=${PY:-.venv/bin/python}
OUT=${OUT:-results/compiled_s53}
for ds in ${DATASETS:-humaneval gsm8k}; do
  /usr/bin/time -f "wall_s %e" "$PY" -m fastforward bench --model qwen2.5-coder-1.5b --draft qwen2.5-coder-0.5b \
    --dataset "$ds" --limit "${LIMIT:-3}" --max-new-tokens 128 --threads 2 --dtype float32 --weights w8a8 \
    --path auto --compile on --buckets 1,4,8 --methods "${METHODS:-ar,pld,suffix,sd}" \
    --opt sd.draft_bits=8 --opt sd.act8=true --llamacpp ${LLAMACPP:-~/.cache/fastforward/llamacpp} \
    --out "$OUT/qwen15_w8a8_${ds}.json" 2> "$OUT/qwen15_w8a8_${ds}.log"
done

#!/usr/bin/env bash
# Chimera on SmolLM2-135M-Instruct with cost-sized trees (issue 13): a CPU-sized Chimera draft (320
# self-distillation prompts: 160 ShareGPT + 160 GSM8K train, 600 steps), the machine's k-token forward cost
# curve measured afresh, then a bf16 side-by-side bench on MT-bench and GSM8K held-out of AR, pld, Chimera
# with 8k-token heads and tree=auto (the default: each step's tree sized from the measured costs and the
# request's acceptance), the same heads on the static 25-node tree (tree=default) and on the top-1 chain (tree=chain).
# ~1.5 h on a 2-core CPU; resumable (data records on disk are skipped, training continues from its
# checkpoint, the bench from its sample log). PATH_KIND picks the kernel path (default: prepacked).
set -euo pipefail
OUT=${OUT:-runs/chimera_vocab}
MODEL=smollm2-135m
KPATH=${PATH_KIND:-prepacked}
fastforward models pull "$MODEL"
DATA="--model $MODEL --data $OUT/data --sharegpt 160 --gsm8k 160 --max-new-tokens 192"
fastforward train-chimera $DATA --out "$OUT/chimera" --collect-only
if [ ! -f "$OUT/chimera/draft.safetensors" ]; then
  resume=""; [ -f "$OUT/chimera/checkpoint/progress.json" ] && resume="--resume"
  fastforward train-chimera $DATA --out "$OUT/chimera" --steps 600 --batch-size 8 --max-len 256 \
    --ce-positions 256 --lr 1e-3 --warmup 50 --save-every 100 $resume
fi
fastforward costs --model "$MODEL" --dtype bfloat16 --path default,prepacked --refresh \
  --out results/chimera_auto_costs.json
BENCH=results/chimera_auto_bench_bfloat16.json
resume=""; [ -s "${BENCH%.json}.samples.jsonl" ] && resume="--resume"
fastforward bench --model "$MODEL" --dtype bfloat16 --path "$KPATH" --dataset mtbench,gsm8k --limit 10 \
  --max-new-tokens 128 --methods ar,pld,chimera:v8,chimera:v8s,chimera:v8c \
  --opt chimera:v8.heads="$OUT/chimera" --opt chimera:v8.vocab=8192 \
  --opt chimera:v8s.heads="$OUT/chimera" --opt chimera:v8s.vocab=8192 --opt chimera:v8s.tree=default \
  --opt chimera:v8c.heads="$OUT/chimera" --opt chimera:v8c.vocab=8192 --opt chimera:v8c.tree=chain \
  --out "$BENCH" $resume

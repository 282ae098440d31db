#!/usr/bin/env bash
# Chimera with reduced-vocabulary heads on SmolLM2-135M-Instruct (issue 13): a CPU-sized Chimera draft
# (480 distillation prompts: 240 ShareGPT + 240 GSM8K train, 600 steps), then a bf16 side-by-side bench on
# MT-bench and GSM8K held-out of AR, the draft's heads over the whole 49k vocabulary, and over the 8k / 16k
# most frequent tokens (`--opt vocab=K`; the target still verifies over the whole vocabulary).
# ~1 h on a 2-core CPU; resumable (data records on disk are skipped, training continues from its checkpoint,
# the bench from its sample log).
set -euo pipefail
OUT=${OUT:-runs/chimera_vocab}
MODEL=smollm2-135m
fastforward models pull "$MODEL"
DATA="--model $MODEL --data $OUT/data --sharegpt 240 --gsm8k 240 --max-new-tokens 192"
fastforward train-chimera $DATA --out "$OUT/chimera" --collect-only
if [ ! -f "$OUT/chimera/draft.safetensors" ]; then
  resume=""; [ -f "$OUT/chimera/checkpoint/progress.json" ] && resume="--resume"
  fastforward train-chimera $DATA --out "$OUT/chimera" --steps 600 --batch-size 8 --max-len 256 \
    --ce-positions 256 --lr 1e-3 --warmup 50 --save-every 100 $resume
fi
BENCH=results/chimera_vocab_bench_bfloat16.json
resume=""; [ -s "${BENCH%.json}.samples.jsonl" ] && resume="--resume"
fastforward bench --model "$MODEL" --dtype bfloat16 --dataset mtbench,gsm8k --limit 10 --max-new-tokens 128 \
  --methods ar,pld,chimera,chimera:v16,chimera:v8 --opt chimera.heads="$OUT/chimera" \
  --opt chimera:v16.heads="$OUT/chimera" --opt chimera:v16.vocab=16384 \
  --opt chimera:v8.heads="$OUT/chimera" --opt chimera:v8.vocab=8192 --out "$BENCH" $resume

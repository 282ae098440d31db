#!/usr/bin/env bash
# Chimera on SmolLM2-135M-Instruct with a prompt-lookup branch (issue 13): a CPU-sized Chimera draft (720
# self-distillation prompts collected in bf16: 480 ShareGPT + 240 GSM8K train, 192 tokens each; 1200 steps),
# the machine's k-token forward cost curve measured afresh, then a bf16 side-by-side bench on MT-bench and
# GSM8K held-out of AR, generate(), pld, Chimera with 8k-token heads and cost-sized trees (tree=auto, the default), the
# same with a prompt-lookup branch grafted onto each tree (lookup=8), and the static 25-node tree with the
# branch; then the fp32 exactness check of the lookup variant against AR.
# ~1.3 h on a 2-core CPU with AMX (collection ~35 min, training ~20 min, benches ~20 min); resumable (data
# records on disk are skipped, training continues from its checkpoint, the benches from their sample logs).
# PATH_KIND picks the kernel path (default: prepacked).
set -euo pipefail
OUT=${OUT:-runs/chimera_amx}
MODEL=smollm2-135m
KPATH=${PATH_KIND:-prepacked}
fastforward models pull "$MODEL"
DATA="--model $MODEL --dtype bfloat16 --data $OUT/data --sharegpt 480 --gsm8k 240 --max-new-tokens 192"
fastforward train-chimera $DATA --out "$OUT/chimera" --collect-only
if [ ! -f "$OUT/chimera/draft.safetensors" ]; then
  resume=""; [ -f "$OUT/chimera/checkpoint/progress.json" ] && resume="--resume"
  fastforward train-chimera $DATA --out "$OUT/chimera" --steps 1200 --batch-size 8 --max-len 256 \
    --ce-positions 256 --lr 1e-3 --warmup 50 --save-every 100 $resume
fi
[ -f results/chimera_lookup_costs.json ] || fastforward costs --model "$MODEL" --dtype bfloat16 \
  --path default,prepacked --refresh --out results/chimera_lookup_costs.json
HEADS="--opt chimera:v8.heads=$OUT/chimera --opt chimera:v8.vocab=8192"
HEADS="$HEADS --opt chimera:v8l.heads=$OUT/chimera --opt chimera:v8l.vocab=8192 --opt chimera:v8l.lookup=8"
HEADS="$HEADS --opt chimera:v8sl.heads=$OUT/chimera --opt chimera:v8sl.vocab=8192 --opt chimera:v8sl.lookup=8"
HEADS="$HEADS --opt chimera:v8sl.tree=default"
BENCH=results/chimera_lookup_bench_bfloat16.json
resume=""; [ -s "${BENCH%.json}.samples.jsonl" ] && resume="--resume"
[ -f "$BENCH" ] || fastforward bench --model "$MODEL" --dtype bfloat16 --path "$KPATH" --dataset mtbench,gsm8k --limit 10 \
  --max-new-tokens 128 --methods ar,hf_generate,pld,chimera:v8,chimera:v8l,chimera:v8sl $HEADS --out "$BENCH" $resume
EXACT=results/chimera_lookup_exact_float32.json
resume=""; [ -s "${EXACT%.json}.samples.jsonl" ] && resume="--resume"
[ -f "$EXACT" ] || fastforward bench --model "$MODEL" --dtype float32 --dataset mtbench,gsm8k --limit 5 --max-new-tokens 64 \
  --methods ar,chimera:v8,chimera:v8l,chimera:v8sl $HEADS --out "$EXACT" $resume

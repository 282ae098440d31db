#!/usr/bin/env bash
# Issue 19 measurements on SmolLM2-135M -> results/sampling.json:
#  1. a small Chimera draft for the tree methods (skipped when $HEADS already holds one; CPU: 64 ShareGPT +
#     24 GSM8K-train prompts answered by the fp32 target, 300 steps; far below `make chimera`'s 640 prompts);
#  2. sampled speed per method against sampled AR in the same run: MT-bench, temperature 0.7 and 1.0, in
#     $DTYPE: float32 by default, what `--dtype auto` picks on an AVX2-only CPU (bf16 is emulated there: the
#     first bf16 turn ran AR 21 tok/s, chimera 2.6, lookahead 3.8); DTYPE=bfloat16 on a CPU with native bf16;
#  3. Consultant acceptance on the Chimera tree against exact (greedy) Chimera: GSM8K held-out, greedy,
#     scored for accuracy;
#  4. every method's end-to-end distribution check at the same temperatures (scripts/sampling_results.py).
# Timed runs hold /tmp/ffbench.lock; run nothing else meanwhile. About 35 minutes on 2 cores after step 1.
set -euo pipefail

export FASTFORWARD_CACHE=${FASTFORWARD_CACHE:-$HOME/.cache/fastforward}
MODEL=${MODEL:-smollm2-135m}
OUT=${OUT:-runs/sampling}
HEADS=${HEADS:-$OUT/chimera}
DTYPE=${DTYPE:-float32}
LIMIT=${LIMIT:-4}         # MT-bench questions (2 turns each) per temperature
GSM_LIMIT=${GSM_LIMIT:-8} # GSM8K held-out problems for Consultant vs exact Chimera
mkdir -p "$OUT" results

if [ ! -f "$HEADS/draft.safetensors" ]; then
  DATA="--model $MODEL --data $OUT/data --sharegpt 64 --gsm8k 24 --max-new-tokens 192"
  fastforward train-chimera $DATA --threads 2 --out "$HEADS" --collect-only
  resume=""; [ -f "$HEADS/checkpoint/progress.json" ] && resume="--resume"
  fastforward train-chimera $DATA --out "$HEADS" --steps 300 --batch-size 8 --max-len 256 --ce-positions 256 \
    --lr 1e-3 --warmup 30 --save-every 50 --threads 2 $resume
fi

METHODS="ar,pld,lookahead,jacobi,qsd,chimera"
for T in 0.7 1.0; do
  flock /tmp/ffbench.lock fastforward bench --model "$MODEL" --dtype "$DTYPE" --dataset mtbench --limit "$LIMIT" \
    --max-new-tokens 128 --temperature "$T" --seed 0 --methods "$METHODS" --opt chimera.heads="$HEADS" \
    --out "results/sampling_bench_t${T/./}.json"
done

flock /tmp/ffbench.lock fastforward bench --model "$MODEL" --dtype "$DTYPE" --dataset gsm8k --limit "$GSM_LIMIT" \
  --max-new-tokens 192 --methods ar,chimera,chimera:cd --opt chimera.heads="$HEADS" \
  --opt chimera:cd.heads="$HEADS" --opt chimera:cd.accept=consultant --out results/sampling_consultant_gsm8k.json
fastforward score results/sampling_consultant_gsm8k.json

python scripts/sampling_results.py --bench results/sampling_bench_t07.json results/sampling_bench_t10.json \
  --consultant results/sampling_consultant_gsm8k.json --out results/sampling.json

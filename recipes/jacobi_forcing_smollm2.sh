#!/usr/bin/env bash
# CLLM vs Jacobi Forcing on SmolLM2-135M-Instruct with the GSM8K train part (issue 14), side by side:
#   1. one trajectory file (Jacobi n=16 of the base model, every state kept, the random y(0) included);
#   2. CLLM (noisy state after clean earlier blocks) and Jacobi Forcing (every block's noisy state after the
#      earlier noisy blocks, cyclic noise schedule w=8, forward KL / blocks + 10 x AR) trained on the same
#      prompts with the same packed-token budget, concurrently (one core each, so they share the machine's
#      conditions and their wall times compare), bf16 snapshots for the learning curve;
#   3. the learning curve of both on one chart (held-out tokens per forward vs packed training tokens);
#   4. base / CLLM / Jacobi Forcing on held-out GSM8K, each with three Jacobi decoder variants (plain,
#      rejection recycling, multi-block): tokens per forward, bf16 speedup vs the model's own AR,
#      fp32 identity with its own greedy AR, accuracy, NLL by the base, repetition, distinct-n.
# CPU defaults are the run in docs/results.md, sized for a 2-core machine (~45 min of collection, ~30 min of
# the two trainings side by side, ~40 min of evaluation); every step resumes (collection continues the JSONL,
# training continues from its newest checkpoint; rerun the script after an interruption).
# Larger:   PROMPTS=989 BUDGET=3400000 SNAP=500 bash recipes/jacobi_forcing_smollm2.sh   (GPU: add DEVICE=cuda)
set -euo pipefail

export FASTFORWARD_CACHE=${FASTFORWARD_CACHE:-$HOME/.cache/fastforward}
OUT=${OUT:-runs/jf}
MODEL=${MODEL:-smollm2-135m}
PROMPTS=${PROMPTS:-100}        # GSM8K train-part prompts with trajectories (collection stops here)
BUDGET=${BUDGET:-60000}        # packed training tokens per method
SNAP=${SNAP:-50}               # snapshot (and checkpoint) every N steps for the curve
EVAL_PROMPTS=${EVAL_PROMPTS:-10}  # held-out GSM8K problems timed per model and decoder variant
DEVICE=${DEVICE:-cpu}
THREADS=${THREADS:-1}          # torch threads per training process (two run at once) and for the timed eval
mkdir -p "$OUT" results docs/img

fastforward collect --model "$MODEL" --dataset gsm8k --split train --limit "$PROMPTS" --block-size 16 \
  --max-new-tokens 256 --batch-size 4 --dtype bfloat16 --device "$DEVICE" --out "$OUT/traj.jsonl"

train() {  # $1 = out dir, rest = objective flags
  local out=$1; shift
  local resume=""; [ -d "$out/checkpoints" ] && resume="--resume"
  [ -f "$out/cllm_training.json" ] && return 0
  OMP_NUM_THREADS=$THREADS fastforward train-cllm --model "$MODEL" --data "$OUT/traj.jsonl" --out "$out" \
    --ar-weight 10 --distance fkl --lr 1e-4 --warmup-steps 10 --max-steps 100000 \
    --max-train-tokens "$BUDGET" --save-every "$SNAP" --snapshot-every "$SNAP" --log-every 10 $resume "$@"
}
train "$OUT/cllm" --objective cllm --loss global --ar-target teacher --states-per-block 2 \
  > "$OUT/cllm.log" 2>&1 &
cllm_pid=$!
train "$OUT/forcing" --objective forcing --noise-window 8 --noise-strategy progressive --augment 0 \
  > "$OUT/forcing.log" 2>&1 &
forcing_pid=$!
status=0
wait "$cllm_pid" || status=1
wait "$forcing_pid" || status=1
[ "$status" = 0 ] || { echo "a training failed: see $OUT/cllm.log, $OUT/forcing.log" >&2; exit 1; }

fastforward cllm-curve --base "$MODEL" --run cllm="$OUT/cllm" --run jacobi_forcing="$OUT/forcing" \
  --dataset gsm8k --split heldout --limit 10 --block-size 16 --max-new-tokens 128 --dtype bfloat16 \
  --device "$DEVICE" --out results/jacobi_forcing_curve.json --plot docs/img/jacobi_forcing_curve.png

# timed: one thread (the measured run shared the machine's other core with the test suite)
OMP_NUM_THREADS=$THREADS flock /tmp/ffbench.lock fastforward eval-jacobi --base "$MODEL" \
  --model cllm="$OUT/cllm" --model jacobi_forcing="$OUT/forcing" \
  --variant plain: --variant recycle:pool_size=2 --variant multiblock:max_blocks=2,spawn_ratio=0.5 \
  --dataset gsm8k --split heldout --limit "$EVAL_PROMPTS" --block-size 16 --max-new-tokens 128 \
  --dtype bfloat16 --exact-limit 3 --device "$DEVICE" --out results/jacobi_forcing.json

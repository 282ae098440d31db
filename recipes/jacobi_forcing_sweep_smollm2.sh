#!/usr/bin/env bash
# The AR-weight sweep of issue 14 (docs/results.md, "The AR-weight sweep at the same budget"): CLLM and
# Jacobi Forcing trained on the trajectories of recipes/jacobi_forcing_smollm2.sh (run that first) with
# L = consistency + w x AR for each w, the same packed-token budget, two trainings at a time (one thread
# each), then every model's plain Jacobi on held-out GSM8K in one eval process. Resumable like the recipe.
#   CLLM_W="1 0.3" FORCING_W="1 0.3 0.1" bash recipes/jacobi_forcing_sweep_smollm2.sh
set -euo pipefail
OUT=${OUT:-runs/jf}
MODEL=${MODEL:-smollm2-135m}
BUDGET=${BUDGET:-60000}
CLLM_W=${CLLM_W:-"1 0.3"}
FORCING_W=${FORCING_W:-"1 0.3 0.1"}
[ -f "$OUT/traj.jsonl" ] || { echo "no $OUT/traj.jsonl: run recipes/jacobi_forcing_smollm2.sh first" >&2; exit 2; }

train() {  # $1 = out dir, $2 = AR weight, rest = objective flags
  local out=$1 w=$2; shift 2
  local resume=""; [ -d "$out/checkpoints" ] && resume="--resume"
  [ -f "$out/cllm_training.json" ] && return 0
  OMP_NUM_THREADS=1 fastforward train-cllm --model "$MODEL" --data "$OUT/traj.jsonl" --out "$out" \
    --ar-weight "$w" --distance fkl --lr 1e-4 --warmup-steps 10 --max-steps 100000 \
    --max-train-tokens "$BUDGET" --save-every 50 --log-every 10 $resume "$@" > "$out.log" 2>&1
}
label() { echo "$1" | tr -d .; }  # 0.3 -> 03
jobs_=()
for w in $CLLM_W; do
  jobs_+=("cllm_ar$(label "$w") $w --objective cllm --loss global --ar-target teacher --states-per-block 2")
done
for w in $FORCING_W; do
  jobs_+=("forcing_ar$(label "$w") $w --objective forcing --noise-window 8 --noise-strategy progressive --augment 0")
done
models=()
for ((i = 0; i < ${#jobs_[@]}; i += 2)); do  # two at a time, one core each
  read -r -a a <<< "${jobs_[i]}"; train "$OUT/${a[0]}" "${a[@]:1}" &
  pa=$!
  if ((i + 1 < ${#jobs_[@]})); then read -r -a b <<< "${jobs_[i + 1]}"; train "$OUT/${b[0]}" "${b[@]:1}" & pb=$!; wait "$pb"; fi
  wait "$pa"
done
for j in "${jobs_[@]}"; do
  name=${j%% *}; models+=(--model "${name/forcing/jacobi_forcing}=$OUT/$name")
done
OMP_NUM_THREADS=${THREADS:-2} flock /tmp/ffbench.lock fastforward eval-jacobi --base "$MODEL" --skip-base-variants \
  "${models[@]}" --variant plain: --dataset gsm8k --split heldout --limit 10 --block-size 16 \
  --max-new-tokens 128 --dtype bfloat16 --exact-limit 3 --out results/jacobi_forcing_sweep_rerun.json

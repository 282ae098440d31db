#!/usr/bin/env bash
# The GPU suite (issue 18): every method's benchmark, CLLM at paper-like scale, Chimera with more data, then
# evaluation, on one CUDA GPU, in resumable steps of under 10 minutes each on an H100-class GPU.
#
#   bash recipes/gpu_suite.sh              # every step not yet done, in order
#   bash recipes/gpu_suite.sh cllm-train   # one step (rerun it after an interruption: it resumes)
#   bash recipes/gpu_suite.sh --list       # the steps
#   DRY=1 OUT=/tmp/s RUNS=/tmp/r bash recipes/gpu_suite.sh   # CPU dry run, tiny sizes (tests/test_gpu_suite.py)
#
# Results go to $OUT (default results/gpu) in the same JSON contracts as the CPU results (bench files name the
# GPU in `hardware`); trained models to $RUNS (default runs/gpu). A finished step leaves $OUT/.done/STEP.
# Every step resumes: bench steps from their *.samples.jsonl, collection from its JSONL, training from its
# newest checkpoint (every SAVE steps). A step stops after STEP_SECONDS (default 540), exits 3 and says
# "rerun to continue", so no single call runs past 10 minutes; rerunning the script continues it.
set -euo pipefail

OUT=${OUT:-results/gpu}
RUNS=${RUNS:-runs/gpu}
STEP_SECONDS=${STEP_SECONDS:-540}
if [ "${DRY:-0}" = 1 ]; then  # CPU, tiny: proves every step's command line and file contract
  DEV="--device cpu"; DT=float32; LIMIT=1; TOK=8; DATASETS=mtbench
  SMALL=smollm2-135m; MID=smollm2-135m; BIG=smollm2-135m; DRAFT=smollm2-135m
  CLLM_PROMPTS=2; CLLM_STEPS=2; CLLM_BATCH=1; SAVE=1; CHIMERA_PROMPTS=2; CHIMERA_STEPS=2; EVAL_LIMIT=1; BLOCK=4
else
  DEV="--device cuda"; DT=bfloat16; LIMIT=${LIMIT:-20}; TOK=${TOK:-256}; DATASETS=mtbench,gsm8k,humaneval
  SMALL=smollm2-135m; MID=qwen2.5-coder-0.5b; BIG=qwen2.5-coder-1.5b; DRAFT=qwen2.5-coder-0.5b
  # CLLM: all 989 GSM8K-train prompts; 6000 steps x 8 prompts x ~16 blocks x ~16 positions is > 1M
  # consistency tokens (the CPU curve put 3.0 tokens/forward at ~3.4M packed tokens)
  CLLM_PROMPTS=989; CLLM_STEPS=6000; CLLM_BATCH=8; SAVE=200; CHIMERA_PROMPTS=400; CHIMERA_STEPS=3000; EVAL_LIMIT=64
  BLOCK=16
fi
mkdir -p "$OUT/.done" "$RUNS"

resume_flag() { [ -s "$1" ] && echo "--resume" || true; }  # a bench's sample log exists: continue it

bench() {  # bench NAME MODEL [extra args...]: every method side by side with AR on each dataset
  local name=$1 model=$2; shift 2
  local out="$OUT/bench_$name.json"
  bounded fastforward bench --model "$model" $DEV --dtype $DT --dataset $DATASETS --limit $LIMIT \
    --max-new-tokens $TOK --out "$out" $(resume_flag "${out%.json}.samples.jsonl") "$@"
}

bounded() {  # run a resumable command for at most STEP_SECONDS; exit 3 (not done) when cut
  local rc=0
  timeout --signal=INT "$STEP_SECONDS" "$@" || rc=$?
  if [ "$rc" = 124 ] || [ "$rc" = 130 ]; then
    echo "gpu_suite: step cut after ${STEP_SECONDS}s; rerun the same step to continue" >&2
    exit 3
  fi
  return "$rc"
}

STEPS=(bench-small bench-mid bench-big-sd cllm-collect cllm-train cllm-eval chimera-train chimera-bench)

run_step() {
  case $1 in
    bench-small) bench smollm2 "$SMALL" --methods all ;;
    bench-mid) bench qwen05 "$MID" --methods all ;;
    bench-big-sd) bench qwen15_sd "$BIG" --draft "$DRAFT" \
        --methods ar,hf_generate,pld,lookahead,sd,consultant,hf_assisted ;;
    cllm-collect) bounded fastforward collect --model "$SMALL" --dataset gsm8k --split train \
        --limit $CLLM_PROMPTS --block-size $BLOCK --max-new-tokens $TOK --batch-size 32 --dtype $DT $DEV \
        --out "$RUNS/cllm_traj.jsonl" ;;
    cllm-train)
      local r=""; [ -d "$RUNS/cllm/checkpoints" ] && r="--resume"
      bounded fastforward train-cllm --model "$SMALL" --data "$RUNS/cllm_traj.jsonl" --out "$RUNS/cllm" \
        --loss global --distance fkl --ar-weight 10 --ar-target teacher --batch-size $CLLM_BATCH \
        --max-steps $CLLM_STEPS --lr 5e-5 --save-every $SAVE $r \
        --mixed-precision $([ "$DT" = bfloat16 ] && echo bf16 || echo no) ;;
    cllm-eval) fastforward eval-cllm --base "$SMALL" --cllm "$RUNS/cllm" --dataset gsm8k --split heldout \
        --limit $EVAL_LIMIT --block-size $BLOCK --max-new-tokens $TOK --dtype $DT $DEV \
        --exact-limit $LIMIT --quality-limit $EVAL_LIMIT --out "$OUT/cllm_gsm8k.json" ;;
    chimera-train)
      local r=""; [ -f "$RUNS/chimera/checkpoint/progress.json" ] && r="--resume"
      bounded fastforward train-chimera --model "$SMALL" $DEV --out "$RUNS/chimera" \
        --sharegpt $CHIMERA_PROMPTS --gsm8k $CHIMERA_PROMPTS --max-new-tokens $TOK --steps $CHIMERA_STEPS \
        --save-every $SAVE --eval --eval-prompts $LIMIT --eval-decode $LIMIT --report "$OUT/chimera_heads.json" $r ;;
    chimera-bench) bench chimera "$SMALL" --methods ar,chimera,pld --opt chimera.heads="$RUNS/chimera" ;;
    *) echo "gpu_suite: unknown step '$1' (steps: ${STEPS[*]})" >&2; exit 2 ;;
  esac
}

if [ "${1:-}" = --list ]; then printf '%s\n' "${STEPS[@]}"; exit 0; fi
todo=("$@"); [ ${#todo[@]} = 0 ] && todo=("${STEPS[@]}")
for s in "${todo[@]}"; do
  if [ -f "$OUT/.done/$s" ] && [ $# = 0 ]; then echo "gpu_suite: $s done" >&2; continue; fi
  echo "gpu_suite: $s" >&2
  run_step "$s"
  touch "$OUT/.done/$s"
done

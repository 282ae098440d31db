#!/usr/bin/env bash
# Issue 32, session 56: SmolLM2 float32 packages with one GEMM backend per width (core.compiled.gemm_backends)
# on the 2-vCPU Ice Lake Xeon, beside llama.cpp; one after another on a quiet machine, from the repository root.
#   1. under the AVX2 cap, beside llama.cpp built for AVX2: session 55's script (a user's cold and cached start,
#      the interleaved 1-/8-token probe, MT-bench / GSM8K / HumanEval, 8 prompts, 128 tokens);
#   2. with AVX-512 (no cap), beside llama.cpp F32: the interleaved probe and MT-bench.
set -x
PY=${PY:-.venv/bin/python}
FF=${FF:-.venv/bin/fastforward}
export PY FF
OUT=results/compiled_s56/avx2cap bash results/compiled_s55/run_avx2_cap.sh
date
"$PY" -m fastforward.bench.engine_table interleave --model smollm2-135m --dtype float32 --rounds 3 \
  --llamacpp ~/.cache/fastforward/llamacpp 2>&1 | grep -v Warn | tail -4
date
OUT=results/compiled_s56 DATASETS=mtbench bash results/compiled_s53/run_smollm2_fp32.sh; date
# 3. SmolLM2 W8A8 on GSM8K, ar / lookahead / recycle beside llama.cpp Q8_0, twice before the bench re-warmed
#    after llama.cpp's row (la1, la2, at 649f90b) and once after (la3)
for t in la1 la2 la3; do  # la3: after dd29362 (runner.rewarm)
  DATASETS=gsm8k METHODS=ar,lookahead,recycle TAG=icx_w8a8_$t OUT=results/compiled_s56 bash results/compiled_s53/run_smollm2_w8a8.sh
done

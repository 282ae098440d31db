#!/usr/bin/env bash
# Issue 32, session 55: SmolLM2 in float32 on the same Ice Lake Xeon under the AVX2 cap (a cap, not an AVX2 CPU:
# ATEN_CPU_CAPABILITY=avx2 for ATen's and inductor's kernels, ONEDNN_MAX_CPU_ISA=AVX2 for oneDNN's), beside
# llama.cpp built for AVX2 only (ISA=avx2 bash recipes/llamacpp.sh build && ISA=avx2 bash recipes/llamacpp.sh
# convert): a user's cold and cached start, the interleaved 1-/8-token probe, and the methods on MT-bench, GSM8K
# and HumanEval (8 prompts each, 128 tokens). One after another on a quiet machine, from the repository root.
set -x
export ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2
PY=${PY:-.venv/bin/python}
OUT=${OUT:-results/compiled_s55/avx2cap}
LLAMACPP=${LLAMACPP:-$HOME/.cache/fastforward/llamacpp-avx2}
export PY OUT LLAMACPP
mkdir -p "$OUT"
date
bash results/compile_startup/process_start.sh > "$OUT/process_start.json"; cat "$OUT/process_start.json"
date
"$PY" -m fastforward.bench.engine_table interleave --model smollm2-135m --dtype float32 --rounds 3 \
  --llamacpp "$LLAMACPP" 2>&1 | grep -v Warn | tail -4
date
DATASETS="mtbench gsm8k humaneval" bash results/compiled_s53/run_smollm2_fp32.sh; date

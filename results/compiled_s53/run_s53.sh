#!/usr/bin/env bash
# Issue 32, session 53 (2-vCPU Intel Xeon, Ice Lake: AVX-512 with VNNI, no avx512_bf16, no AMX): everything this
# session measured, one after another on a quiet machine, from the repository root:
# SmolLM2 W8A8 on three datasets, the 1.5B W8A8 pair on two, then (packages cached by then) the width and tree
# probes of both models, the interleaved 1-/8-token probe beside llama.cpp Q8_0 and the int8 GEMMs alone.
set -x
PY=${PY:-.venv/bin/python}
export PY
date
METHODS=ar,jacobi,lookahead,suffix,recycle,pld bash results/compiled_s53/run_smollm2_w8a8.sh; date
bash results/compiled_s53/run_qwen15_w8a8.sh; date
for m in smollm2-135m qwen2.5-coder-1.5b; do
  "$PY" results/compiled_s52/widths.py $m w8a8 compiled 2,4,8 2>&1 | grep "k="
  "$PY" results/compiled_s53/trees.py $m w8a8 2>&1 | grep "tree"
done
for m in smollm2-135m qwen2.5-coder-1.5b; do
  "$PY" -m fastforward.bench.engine_table interleave --model $m --dtype float32 --weights w8a8 --rounds 3 2>&1 | grep -v Warn | tail -8
done
for m in smollm2-135m qwen2.5-coder-1.5b; do "$PY" results/compiled_s53/gemm_int8.py $m; done
date

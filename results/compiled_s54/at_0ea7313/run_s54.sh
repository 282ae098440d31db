#!/usr/bin/env bash
# Issue 32, session 54 (2-vCPU Intel Xeon, Ice Lake: AVX-512 with VNNI, no avx512_bf16, no AMX): W8A8 packages
# over 2+ tokens run oneDNN's prepacked int8 linear (core.int8_gemm). One after another on a quiet machine, from
# the repository root: the width probes of both W8A8 models (packages built here), the interleaved 1-/8-token
# probe beside llama.cpp Q8_0, the 1.5B W8A8 pair on HumanEval and GSM8K, SmolLM2 W8A8 on three datasets.
set -x
PY=${PY:-.venv/bin/python}
OUT=${OUT:-results/compiled_s54}
export PY OUT
date
for m in smollm2-135m qwen2.5-coder-1.5b; do
  "$PY" results/compiled_s52/widths.py $m w8a8 compiled 2,4,8 2>&1 | grep "k="
done
date
for m in smollm2-135m qwen2.5-coder-1.5b; do
  "$PY" -m fastforward.bench.engine_table interleave --model $m --dtype float32 --weights w8a8 --rounds 3 2>&1 | grep -v Warn | tail -8
done
date
bash results/compiled_s53/run_qwen15_w8a8.sh; date
METHODS=ar,jacobi,lookahead,suffix,recycle,pld bash results/compiled_s53/run_smollm2_w8a8.sh; date

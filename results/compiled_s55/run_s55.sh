#!/usr/bin/env bash
# Issue 32, session 55 (2-vCPU Intel Xeon, Ice Lake: AVX-512 with VNNI, no avx512_bf16, no AMX): W8A8 after the
# query is materialized before rowwise attention's score loop (core.compiled.materialized). One after another on
# a quiet machine, from the repository root, packages built beforehand by
# `for m in qwen2.5-coder-1.5b smollm2-135m; do python results/compiled_s52/widths.py $m w8a8 compiled 2,4,8; done`
# (widths.log): the interleaved 1-/8-token probe beside llama.cpp Q8_0, the 1.5B W8A8 pair on HumanEval and GSM8K,
# SmolLM2 W8A8 on MT-bench, GSM8K and HumanEval.
set -x
PY=${PY:-.venv/bin/python}
OUT=${OUT:-results/compiled_s55}
export PY OUT
date
for m in qwen2.5-coder-1.5b smollm2-135m; do
  "$PY" -m fastforward.bench.engine_table interleave --model $m --dtype float32 --weights w8a8 --rounds 3 2>&1 | grep -v Warn | tail -4
done
date
bash results/compiled_s53/run_qwen15_w8a8.sh; date
METHODS=ar,jacobi,lookahead,suffix,recycle,pld bash results/compiled_s53/run_smollm2_w8a8.sh; date

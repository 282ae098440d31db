#!/usr/bin/env bash
# Issue 32, session 54 (2-vCPU Intel Xeon, Ice Lake: AVX-512 with VNNI, no avx512_bf16, no AMX), the final code:
# W8A8 packages over 2+ tokens run their large int8 GEMMs (8M+ weights) through oneDNN's prepacked int8 linear
# (core.int8_gemm), and a chain wider than the widest compiled width goes through the graphs in pieces. One after
# another on a quiet machine, from the repository root, packages built beforehand by
# `for m in smollm2-135m qwen2.5-coder-1.5b; do python results/compiled_s52/widths.py $m w8a8 compiled 2,4,8; done`
# (widths_final.log): the interleaved 1-/8-token probe beside llama.cpp Q8_0, the 1.5B W8A8 pair on HumanEval and
# GSM8K, SmolLM2 W8A8 on MT-bench (SMOL_DATASETS: others too; session 55 ran all three).
set -x
PY=${PY:-.venv/bin/python}
OUT=${OUT:-results/compiled_s54}
export PY OUT
date
for m in qwen2.5-coder-1.5b smollm2-135m; do
  "$PY" -m fastforward.bench.engine_table interleave --model $m --dtype float32 --weights w8a8 --rounds 3 2>&1 | grep -v Warn | tail -4
done
date
bash results/compiled_s53/run_qwen15_w8a8.sh; date
DATASETS=${SMOL_DATASETS:-mtbench} METHODS=ar,jacobi,lookahead,suffix,recycle,pld bash results/compiled_s53/run_smollm2_w8a8.sh; date

#!/usr/bin/env bash
# Issue 32, session 55 (2-vCPU Intel Xeon, Ice Lake: AVX-512 with VNNI, no avx512_bf16, no AMX): W8A8 after the
# query is materialized before rowwise attention's score loop (core.compiled.materialized). Session 54's sequence
# (results/compiled_s54/run_final.sh: the interleaved 1-/8-token probe beside llama.cpp Q8_0, the 1.5B W8A8 pair
# on HumanEval and GSM8K, SmolLM2 W8A8) with SmolLM2 on MT-bench, GSM8K and HumanEval. One after another on a
# quiet machine, from the repository root, packages built beforehand by
# `for m in qwen2.5-coder-1.5b smollm2-135m; do python results/compiled_s52/widths.py $m w8a8 compiled 2,4,8; done`
# (widths.log). run_s55.log is the trace of the same commands, written out here before they were shared.
OUT=${OUT:-results/compiled_s55} SMOL_DATASETS="mtbench gsm8k humaneval" exec bash results/compiled_s54/run_final.sh

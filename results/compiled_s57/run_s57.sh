#!/bin/bash
# Session 57, 2-vCPU Ice Lake Xeon (AVX-512 + VNNI, no bf16, no AMX), no ISA cap. Nothing else ran.
#   1. SmolLM2 float32: interleaved 1-/8-token probe beside llama.cpp F32, 6 rounds (ours k8/k1 read per round).
#   2. Qwen2.5-Coder-1.5B float32 beside llama.cpp F32: its packages do not fit this machine's memory (the
#      library says so in one line and runs both widths eagerly), so this is its eager fp32 step, 2 rounds.
# Run from the repository root: bash results/compiled_s57/run_s57.sh
set -x
PY=${PY:-.venv/bin/python}
OUT=results/compiled_s57
"$PY" -m fastforward.bench.engine_table interleave --model smollm2-135m --dtype float32 --rounds 6 \
  > $OUT/interleave_smollm2_fp32.jsonl 2> $OUT/interleave_smollm2_fp32.log
"$PY" -m fastforward.bench.engine_table interleave --model qwen2.5-coder-1.5b --dtype float32 --rounds 2 \
  > $OUT/interleave_qwen15_fp32.jsonl 2> $OUT/interleave_qwen15_fp32.log
#   3. every method in --methods all, default options, SmolLM2 float32 with AVX-512 (the default precision
#      here), beside llama.cpp F32: GSM8K (held-out), HumanEval and MT-bench, 5 prompts each, 128 tokens
#      (at 83eedb7; GSM8K before it, at 230385b, is in before_83eedb7/).
# The bit checks (bits_fp32*.txt): python results/compiled_s57/bits2.py. The denominator's cost
# (ab_denominator.txt): ab.py alternated between a checkout of 230385b and one of 83eedb7.
for ds in gsm8k humaneval mtbench; do
  /usr/bin/time -f "wall_s %e" "$PY" -m fastforward bench --model smollm2-135m --dataset "$ds" --limit 5 \
    --max-new-tokens 128 --threads 2 --dtype float32 --path auto --compile on --methods all \
    --llamacpp ~/.cache/fastforward/llamacpp --out $OUT/bench_${ds}_all_fp32.json 2> $OUT/bench_${ds}_all_fp32.log
done
# 4. jacobi with fewer rows (results/compiled_s57/jacobi/), MT-bench, 5 prompts, 128 tokens, at 83eedb7:
# (and ar,jacobi,lookahead,qsd,layerskip with --llamacpp, the file named ..._qsd_layerskip_llamacpp)
for m in "ar,jacobi,lookahead" "ar,ar_eager,hf_generate,jacobi,lookahead"; do
  "$PY" -m fastforward bench --model smollm2-135m --dataset mtbench --limit 5 --max-new-tokens 128 --threads 2 \
    --dtype float32 --path auto --compile on --methods $m --out $OUT/jacobi/bench_mtbench_$(echo $m | tr ',' '_').json
done

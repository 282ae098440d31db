#!/usr/bin/env bash
# Issue 32, session 62, on the Zen 4 EPYC (2 vCPUs, AVX-512 with bf16 and VNNI, no AMX, 32 MB L3): W8A8's
# 1-token step on inductor's VNNI GEMM template (core.int8_gemm.split_rows, bbc39af) against _int_mm (8a5ba0d).
# "before" runs a frozen copy of 8a5ba0d, "after" one of the session's code (git archive REV | tar -x -C DIR;
# PYTHONPATH=DIR/src: the venv's own install points at another checkout). Nothing else ran beside a timing.
# STEP=n PY=.venv/bin/python bash results/compiled_s62/run_s62.sh
set -euo pipefail
PY=${PY:-.venv/bin/python}
OUT=${OUT:-results/compiled_s62}
STORE=${STORE:-$HOME/.cache/fastforward/compiled}
case "${STEP:?}" in
1)  # ATen's int8 kernels over 1-8 rows, weights past the L3: GB/s (8a5ba0d)
    "$PY" $OUT/gemv_rows.py > $OUT/gemv_rows.txt ;;
2)  # the split form prototyped on 28 products of one shape (before it went into core.int8_gemm)
    L=28 BACK=CPP "$PY" $OUT/split_harness.py; K=8960 N=1536 L=28 BACK=CPP "$PY" $OUT/split_harness.py ;;
3)  # SmolLM2 W8A8, 1- and 8-token steps interleaved with llama.cpp Q8_0, 2 rounds: run once from 8a5ba0d
    # (before) and once from bbc39af (after)
    "$PY" -m fastforward.bench.engine_table interleave --model smollm2-135m --dtype float32 --weights w8a8 \
      --rounds 2 > $OUT/interleave_smollm2_w8a8_${TAG:?}.txt ;;
4)  # the two 1-token packages in one process, alternately (OLD, NEW: their k1-s512.pt2 in the store)
    LHD=30,3,64 "$PY" $OUT/ab_k1.py old=${SMOL_OLD:?} split=${SMOL_NEW:?} > $OUT/ab_k1_smollm2.txt
    "$PY" $OUT/ab_k1.py old=${QWEN_OLD:?} split=${QWEN_NEW:?} > $OUT/ab_k1_qwen15.txt ;;
5)  # the 1.5B pair in W8A8 on HumanEval beside llama.cpp Q8_0 (session 53's script), once from each revision
    DATASETS=humaneval LIMIT=3 OUT=$OUT/${TAG:?} PY=$PY bash results/compiled_s53/run_qwen15_w8a8.sh ;;
6)  # the 1.5B in W8A8, 1- and 8-token steps interleaved with llama.cpp Q8_0, 4 rounds (bbc39af)
    "$PY" -m fastforward.bench.engine_table interleave --model qwen2.5-coder-1.5b --dtype float32 \
      --weights w8a8 --rounds 4 > $OUT/interleave_qwen15_w8a8.txt ;;
esac
# 7) after step 5's pld drafted in 34% of its steps: pld's schedule on the same prompts, bbc39af (its packages built
#    by step 5): gamma_auto with 1-token matches (default), a fixed gamma, gamma_auto with matches of 2+ tokens
#    PYTHONPATH=src .venv/bin/python -m fastforward bench --model qwen2.5-coder-1.5b --dataset humaneval --limit 3 \
#      --max-new-tokens 128 --threads 2 --dtype float32 --weights w8a8 --path auto --compile on --buckets 1,4,8 \
#      --methods ar,pld,pld:fixed,pld:ng2 --opt pld:fixed.gamma_auto=false --opt pld:ng2.ngram_min=2 \
#      --out results/compiled_s62/pld_sched.json

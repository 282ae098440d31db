#!/usr/bin/env bash
# Session 65 (issue 32), a 2-vCPU AMD EPYC family 25 model 17 (Zen 4: AVX-512 with bf16 and VNNI, no AMX,
# 32 MB L3), no ISA cap. Steps 1-3 ran on a frozen copy of REV (git archive REV | tar -x; .venv linked from the
# main checkout; PYTHONPATH=$PWD/src), one at a time, nothing else of ours running (step 4 at d614fda, the
# front's final code). OUT: where files go.
#   STEP=1 REV=04360c4 bash results/compiled_s65/run_s65.sh
# The probes before them (kc.py, kprof.py, the C harnesses) are in kc.py's and kprof.py's docstrings and
# gemm_probe.md.
set -euo pipefail
PY=${PY:-.venv/bin/python}
OUT=${OUT:-results/compiled_s65}
case "${STEP:?}" in
1)  # SmolLM2 fp32's 1- and 8-token steps through the g++ front, interleaved with llama.cpp F32, 4 rounds, two
    # processes (the packages built first, into the default store, under the new fingerprint)
    for r in 1 2; do
      "$PY" -m fastforward.bench.engine_table interleave --model smollm2-135m --dtype float32 --rounds 4 \
        > $OUT/interleave_smollm2_fp32_${REV:?}_r$r.txt 2>> $OUT/interleave_${REV}.log
    done ;;
2)  # every default method on SmolLM2 fp32, one dataset per DATASETS entry, 8 prompts, 128 tokens, beside
    # llama.cpp F32, with the noise floor
    for ds in ${DATASETS:-humaneval}; do
      "$PY" -m fastforward bench --model smollm2-135m --dataset "$ds" --limit 8 --max-new-tokens 128 \
        --threads 2 --dtype float32 --path auto --compile on --methods all --noise-floor \
        --llamacpp ~/.cache/fastforward/llamacpp --out $OUT/bench_${ds}_${REV:?}.json 2> $OUT/bench_${ds}_${REV}.log
    done ;;
3)  # the 1.5B in W8A8 through the g++ front: its 1- and 8-token steps interleaved with llama.cpp Q8_0, 4 rounds
    # (inductor's VNNI micro-kernel holds 6 rows x 4 vectors = 24 accumulators, the count the front fixes)
    "$PY" -m fastforward.bench.engine_table interleave --model qwen2.5-coder-1.5b --dtype float32 --weights w8a8 \
      --rounds 4 > $OUT/interleave_qwen15_w8a8_${REV:?}.txt 2>> $OUT/interleave_${REV}.log ;;
4)  # a user's start with --compile on (session 60's step 1): eager, cold (empty package store and inductor
    # cache, so the g++ front is written and every kernel built through it), cached
    FF="$PY -m fastforward" REV=$REV bash results/compile_startup/process_start.sh > $OUT/process_start_${REV}.json ;;
esac

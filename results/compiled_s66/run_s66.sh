#!/usr/bin/env bash
# Session 66 (issue 32), a 2-vCPU AMD EPYC family 25 model 17 (Zen 4: AVX-512 with bf16 and VNNI, no AMX, 32 MB
# L3), no ISA cap. Each step ran on a frozen copy of 2707a27 (git archive 2707a27 | tar -x; .venv linked from the
# main checkout; PYTHONPATH=$PWD/src), one at a time, nothing else of ours running. OUT: where files go.
#   STEP=1 bash results/compiled_s66/run_s66.sh
set -euo pipefail
PY=${PY:-.venv/bin/python}
OUT=${OUT:-results/compiled_s66}
HERE=$(dirname "$0")
case "${STEP:?}" in
1)  # the 1.5B's down projection over 8 rows: oneDNN against the VNNI template, through the front and not
    for spec in "shift 1" "shift 0" "aten 1"; do
      set -- $spec
      "$PY" "$HERE/int8_k.py" build "$1" "$2" 8960 1536 8 8 "/tmp/k8960_$1_f$2.pt2"
    done
    for order in "aten_f1 shift_f1 shift_f0" "shift_f0 shift_f1 aten_f1"; do
      "$PY" "$HERE/int8_k.py" ab 8960 1536 8 8 $(for p in $order; do echo "/tmp/k8960_$p.pt2"; done)
    done > $OUT/int8_k8960_ab.txt ;;
2)  # the 1.5B in bfloat16, 1- and 8-token steps interleaved with llama.cpp BF16 (the second file: SMALL_M=8 in
    # compiled.py of a second frozen copy, the 8-token package on inductor's bf16 templates)
    "$PY" -m fastforward.bench.engine_table interleave --model qwen2.5-coder-1.5b --dtype bfloat16 --rounds 4 \
      > $OUT/interleave_qwen15_bf16_2707a27.txt ;;
3)  # every default method on SmolLM2 fp32, HumanEval, 8 prompts, 128 tokens, beside llama.cpp F32
    OUT=$OUT STEP=2 REV=2707a27 DATASETS=humaneval PY=$PY bash results/compiled_s65/run_s65.sh ;;
4)  # SmolLM2 fp32's 1- and 8-token steps under the AVX2 cap, interleaved with llama.cpp's AVX2 build
    # (ISA=avx2 bash recipes/llamacpp.sh build), 4 rounds
    ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 "$PY" -m fastforward.bench.engine_table interleave \
      --model smollm2-135m --dtype float32 --rounds 4 --llamacpp ~/.cache/fastforward/llamacpp-avx2 \
      > $OUT/interleave_smollm2_fp32_avx2cap_2707a27.txt ;;
5)  # make demo on a fresh clone (the packages from the cache step 3 filled)
    git clone -q . /tmp/demo && (cd /tmp/demo && make demo) ;;
esac

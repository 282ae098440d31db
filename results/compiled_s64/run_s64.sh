#!/usr/bin/env bash
# Session 64 (issue 32), a 2-vCPU AMD EPYC family 25 model 17 (Zen 4: AVX-512 with bf16 and VNNI, no AMX,
# 32 MB L3). Each step ran on a frozen copy of 462d251 (git archive 462d251 | tar -x; .venv linked from the
# main checkout; PYTHONPATH=$PWD/src), one at a time, nothing else of ours running. OUT: where files go.
#   STEP=1 bash results/compiled_s64/run_s64.sh
set -euo pipefail
PY=${PY:-.venv/bin/python}
OUT=${OUT:-results/compiled_s64}
case "${STEP:?}" in
1)  # under the AVX2 cap: SmolLM2 fp32, every default method on HumanEval beside llama.cpp F32 (AVX2 build)
    # (session 60's step 4 for HumanEval alone, at 462d251: pld sized by match length since session 63)
    STEP=4 SMOL_DATASETS=humaneval REV=462d251 OUT=$OUT bash results/compiled_s60/run_s60.sh ;;
2)  # the software-prefetch probe of the fp32 GEMM micro-kernel: build each variant's 1- and 8-token packages,
    # then alternate processes (4 rounds each); prefetch.py's docstring says what it patches
    for v in "16 T0" "0 T0"; do set -- $v; PF=$1 HINT=$2 MODE=build $PY results/compiled_s64/prefetch.py; done
    for i in 1 2 3 4; do for v in "0 T0" "16 T0"; do set -- $v
      PF=$1 HINT=$2 $PY results/compiled_s64/prefetch.py 2>/dev/null | grep round; done; done \
      > $OUT/prefetch_pf16_t0.jsonl
    PF=64 HINT=T1 MODE=build $PY results/compiled_s64/prefetch.py
    for i in 1 2 3; do for v in "0 T0" "64 T1"; do set -- $v
      PF=$1 HINT=$2 $PY results/compiled_s64/prefetch.py 2>/dev/null | grep round; done; done \
      > $OUT/prefetch_pf64_t1.jsonl ;;
3)  # `make demo` as a new user: a fresh clone of 462d251, its own venv, timed whole
    git clone -q /work/main /tmp/s64/demo && cd /tmp/s64/demo && /usr/bin/time -f "wall_s %e maxrss_kb %M" make demo ;;
4)  # the 1.5B pair in W8A8 on GSM8K: pld keyed (the default) and pooled, suffix, sd with its W8A8 0.5B draft,
    # the noise floor, llama.cpp Q8_0's AR and its speculative decoding
    $PY -m fastforward bench --model qwen2.5-coder-1.5b --draft qwen2.5-coder-0.5b --dataset gsm8k --limit 6 \
      --max-new-tokens 128 --threads 2 --dtype float32 --weights w8a8 --path auto --compile on --buckets 1,4,8 \
      --methods ar,pld,pld:pooled,suffix,sd --opt pld:pooled.by_match=false --opt sd.draft_bits=8 \
      --opt sd.act8=true --noise-floor --llamacpp ~/.cache/fastforward/llamacpp \
      --out $OUT/qwen15_w8a8_gsm8k_462d251.json 2> $OUT/qwen15_w8a8_gsm8k_462d251.log ;;
5)  # the 1.5B W8A8 1-token package step 4 built, alone in a process, five processes then four more with
    # per-round huge-page bytes and thread placement (k1_flip.py)
    P=$(ls -d ~/.cache/fastforward/compiled/7e13fd42a24eed6a)
    for i in 1 2 3 4 5; do echo "== process $i"; K=1 LHD=28,2,128 $PY results/compiled_s62/ab_k1.py k1=$P/k1-s512.pt2; done \
      > $OUT/k1_spread.txt 2>&1
    for i in 1 2 3 4; do echo "== process $i"; $PY results/compiled_s64/k1_flip.py $P/k1-s512.pt2; done > $OUT/k1_flip.txt 2>&1 ;;
esac

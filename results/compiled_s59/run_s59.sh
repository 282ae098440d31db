#!/bin/bash
# Session 59, 2-vCPU AMD EPYC family 25 model 17 (Zen 4; AVX-512 with bf16 and VNNI, no AMX, 32 MB L3), no ISA
# cap. Nothing else of ours ran during a timing. Run from the repository root after
#   bash recipes/llamacpp.sh build && bash recipes/llamacpp.sh convert
#   for m in qwen2.5-coder-1.5b qwen2.5-coder-0.5b; do MODEL=$m KINDS="BF16 Q8_0 F32" bash recipes/llamacpp.sh convert; done
# bash results/compiled_s59/run_s59.sh            (STEPS picks parts 1-7; 1-3 by default; this session ran 1 (before 3f79888: width 8 eager), 7, 1, 2, 3, 4, 6, 4)
set -x
PY=${PY:-.venv/bin/python}
OUT=results/compiled_s59
REV=${REV:-$(git rev-parse --short HEAD)}
for step in ${STEPS:-1 2 3}; do case $step in
1)  # the 1.5B in bf16 (native here): its 1- and 8-token steps interleaved with llama.cpp BF16's, 4 rounds
    # (builds the two packages first; nothing timed while they build)
    /usr/bin/time -f "wall_s %e maxrss_kb %M" "$PY" -m fastforward.bench.engine_table interleave \
      --model qwen2.5-coder-1.5b --dtype bfloat16 --rounds 4 > $OUT/interleave_qwen15_bf16.txt 2> $OUT/interleave_qwen15_bf16.log ;;
2)  # the 1.5B pair in bf16 (graphs for 1 and 8 tokens, the packages of step 1; int8 0.5B draft) beside llama.cpp
    # BF16's AR and its speculative decoding (0.5B BF16 draft), 3 prompts, 128 tokens, with a second AR row
    for ds in ${DATASETS:-humaneval gsm8k}; do
      /usr/bin/time -f "wall_s %e maxrss_kb %M" "$PY" -m fastforward bench --model qwen2.5-coder-1.5b \
        --draft qwen2.5-coder-0.5b --dataset "$ds" --limit 3 --max-new-tokens 128 --threads 2 --dtype bfloat16 \
        --path auto --compile on --buckets 1,8 --methods ar,pld,suffix,sd --opt sd.draft_bits=8 --noise-floor \
        --llamacpp ~/.cache/fastforward/llamacpp --out $OUT/qwen15_bf16_${ds}_${REV}.json 2> $OUT/qwen15_bf16_${ds}_${REV}.log
    done ;;
3)  # SmolLM2 fp32: every default method with the noise floor, beside llama.cpp F32, 8 prompts, 128 tokens
    for ds in ${SMOL_DATASETS:-gsm8k humaneval mtbench}; do
      "$PY" -m fastforward bench --model smollm2-135m --dataset "$ds" --limit 8 --max-new-tokens 128 --threads 2 \
        --dtype float32 --path auto --compile on --methods ar,jacobi,lookahead,suffix,recycle,pld,layerskip,qsd \
        --noise-floor --llamacpp ~/.cache/fastforward/llamacpp --out $OUT/bench_${ds}_${REV}.json \
        2> $OUT/bench_${ds}_${REV}.log
    done ;;
4)  # SmolLM2 fp32: 1- and 8-token steps interleaved with llama.cpp F32, 4 rounds (packages of step 3)
    "$PY" -m fastforward.bench.engine_table interleave --model smollm2-135m --dtype float32 --rounds 4 \
      > $OUT/interleave_smollm2_fp32_r1.txt ;;  # run again 8 minutes later: _r2
6)  # the float32 8-token step on the templates (the default) against oneDNN's linear, alternated 3 times
    MODEL=smollm2-135m DTYPE=float32 MODE=build TEMPLATE_WIDTH=4 WIDTHS=8 STORE=$HOME/.cache/fastforward/compiled_aten8 \
      "$PY" results/compiled_s59/package_ab.py > $OUT/fp32_gemm8_build.log 2>&1
    for c in 1 2 3; do
      MODEL=smollm2-135m DTYPE=float32 MODE=time WIDTHS=1,8 "$PY" results/compiled_s59/package_ab.py 2>/dev/null | grep '^{'
      MODEL=smollm2-135m DTYPE=float32 MODE=time WIDTHS=8 STORE=$HOME/.cache/fastforward/compiled_aten8 \
        "$PY" results/compiled_s59/package_ab.py 2>/dev/null | grep '^{'
    done > $OUT/fp32_gemm8.txt ;;
7)  # the 1.5B's 8-token bf16 package built alone, then inductor's concat-linear pass alternated with the default
    WIDTH=8 "$PY" results/compiled_s59/build_bucket.py > $OUT/build_qwen15_bf16_w8.log 2>&1
    MODE=build CONCAT=1 WIDTHS=8 STORE=$HOME/.cache/fastforward/compiled_concat "$PY" results/compiled_s59/package_ab.py \
      > $OUT/concat_build_w8.log 2>&1
    for c in 1 2 3; do
      MODE=time WIDTHS=1,8 "$PY" results/compiled_s59/package_ab.py 2>/dev/null | grep '^{'
      MODE=time WIDTHS=8 STORE=$HOME/.cache/fastforward/compiled_concat "$PY" results/compiled_s59/package_ab.py 2>/dev/null | grep '^{'
    done > $OUT/concat_time.txt ;;
esac; done

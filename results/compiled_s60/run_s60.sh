#!/usr/bin/env bash
# Session 60 (issue 32), a 2-core AMD EPYC family 25 model 17 (Zen 4; AVX-512 with bf16 and VNNI, no AMX,
# 32 MB L3). Run from a frozen copy of the tree at $REV (git archive REV | tar -x; PYTHONPATH=$PWD/src, PY the
# project's python), one step at a time, nothing else of ours running. OUT defaults to results/compiled_s60.
# Session 60 ran steps 1-5 at f3e30d9, step 5 again at 9cc296e, steps 6-7 at d92b477, and step 4 again for
# GSM8K alone (SMOL_DATASETS=gsm8k TAG=_r2) after its first run overlapped a `git archive | tar` of mine.
#   STEP=1 REV=f3e30d9 bash results/compiled_s60/run_s60.sh
set -euo pipefail
PY=${PY:-.venv/bin/python}
OUT=${OUT:-results/compiled_s60}
CAP=(env ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2)
L2=~/.cache/fastforward/llamacpp-avx2
case "${STEP:?}" in
1)  # a user's start with --compile on: eager, cold (empty package store), cached
    FF="$PY -m fastforward" bash results/compile_startup/process_start.sh > $OUT/process_start_zen4.json ;;
2)  # llama.cpp for AVX2 only (the reference under the cap), its GGUFs linked from the native folder
    ISA=avx2 bash recipes/llamacpp.sh build > $OUT/llamacpp_avx2_build.log 2>&1
    ISA=avx2 bash recipes/llamacpp.sh convert >> $OUT/llamacpp_avx2_build.log 2>&1 ;;
3)  # under the AVX2 cap: SmolLM2 fp32 1- and 8-token steps interleaved with llama.cpp F32 (AVX2 build),
    # 4 rounds (builds the capped packages first, nothing timed meanwhile)
    "${CAP[@]}" "$PY" -m fastforward.bench.engine_table interleave --model smollm2-135m --dtype float32 \
      --rounds 4 --llamacpp $L2 > $OUT/cap_interleave_smollm2_fp32.txt 2> $OUT/cap_interleave_smollm2_fp32.log ;;
4)  # under the AVX2 cap: every default method with the noise floor beside llama.cpp F32 (AVX2 build),
    # 8 prompts, 128 tokens
    for ds in ${SMOL_DATASETS:-gsm8k humaneval mtbench}; do
      "${CAP[@]}" "$PY" -m fastforward bench --model smollm2-135m --dataset "$ds" --limit 8 --max-new-tokens 128 \
        --threads 2 --dtype float32 --path auto --compile on \
        --methods ar,jacobi,lookahead,suffix,recycle,pld,layerskip,qsd --noise-floor --llamacpp $L2 \
        --out $OUT/cap_bench_${ds}_${REV}${TAG:-}.json 2> $OUT/cap_bench_${ds}_${REV}${TAG:-}.log
    done ;;
5)  # no cap: the 1.5B pair in bf16 on GSM8K, 8 prompts (session 59 ran 3), with the noise floor
    /usr/bin/time -f "wall_s %e maxrss_kb %M" "$PY" -m fastforward bench --model qwen2.5-coder-1.5b \
      --draft qwen2.5-coder-0.5b --dataset gsm8k --limit 8 --max-new-tokens 128 --threads 2 --dtype bfloat16 \
      --path auto --compile on --buckets 1,8 --methods ar,pld,suffix,sd --opt sd.draft_bits=8 --noise-floor \
      --llamacpp ~/.cache/fastforward/llamacpp --out $OUT/qwen15_bf16_gsm8k8_${REV}.json \
      2> $OUT/qwen15_bf16_gsm8k8_${REV}.log ;;
6)  # no cap, at d92b477 (interleave on huge pages, as bench/serve/chat): SmolLM2 fp32 and the 1.5B bf16, 1- and
    # 8-token steps interleaved with llama.cpp, 4 rounds, two processes each
    for r in 1 2; do
      "$PY" -m fastforward.bench.engine_table interleave --model smollm2-135m --dtype float32 --rounds 4 \
        > $OUT/huge_interleave_smollm2_fp32_r$r.txt 2>> $OUT/huge_interleave.log
      "$PY" -m fastforward.bench.engine_table interleave --model qwen2.5-coder-1.5b --dtype bfloat16 --rounds 4 \
        > $OUT/huge_interleave_qwen15_bf16_r$r.txt 2>> $OUT/huge_interleave.log
    done ;;
7)  # under the AVX2 cap, at d92b477: SmolLM2 fp32 against llama.cpp's AVX2 build, on huge pages, 4 rounds
    "${CAP[@]}" "$PY" -m fastforward.bench.engine_table interleave --model smollm2-135m --dtype float32 \
      --rounds 4 --llamacpp $L2 > $OUT/cap_huge_interleave_smollm2_fp32.txt 2>> $OUT/huge_interleave.log ;;
esac

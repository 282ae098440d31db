#!/usr/bin/env bash
# Session 61 (issue 32; steps 1-4 at 312cfda, 5-6 at the commit that added them), a 2-core AMD EPYC family 25 model 17 (Zen 4; AVX-512 with bf16 and VNNI, no AMX,
# 32 MB L3). Run from a frozen copy of the tree at $REV (git archive REV | tar -x; PY the project's python),
# one step at a time, nothing else of ours running. OUT defaults to results/compiled_s61.
#   STEP=1 REV=c9d4114 bash results/compiled_s61/run_s61.sh
set -euo pipefail
PY=${PY:-.venv/bin/python}
OUT=${OUT:-results/compiled_s61}
case "${STEP:?}" in
1)  # a new user's `make demo` on a fresh clone of branch $BRANCH of $REPO (its own venv; the model pulled from
    # the wheel cache; compiled packages built where the store lacks them), timed as a whole
    rm -rf /tmp/demo61 && git clone -q -b "${BRANCH:?}" "${REPO:?}" /tmp/demo61
    ( cd /tmp/demo61 && /usr/bin/time -f "wall_s %e maxrss_kb %M" make demo ) > $OUT/demo_fresh_clone.log 2>&1
    cp /tmp/demo61/results/demo.json $OUT/demo_fresh_clone.json
    cp /tmp/demo61/results/demo.md $OUT/demo_fresh_clone.md 2>/dev/null || true ;;
2)  # no cap: the 1.5B in bf16, 1- and 8-token steps interleaved with llama.cpp BF16, 8 rounds, the bytes on
    # 2 MB pages read every round; then a process left on the kernel's pages (FASTFORWARD_HUGE_PAGES=0)
    "$PY" -m fastforward.bench.engine_table interleave --model qwen2.5-coder-1.5b --dtype bfloat16 --rounds 8 \
      > $OUT/interleave_qwen15_bf16_huge.txt 2> $OUT/interleave_qwen15_bf16.log
    FASTFORWARD_HUGE_PAGES=0 "$PY" -m fastforward.bench.engine_table interleave --model qwen2.5-coder-1.5b \
      --dtype bfloat16 --rounds 8 > $OUT/interleave_qwen15_bf16_4k.txt 2>> $OUT/interleave_qwen15_bf16.log ;;
3)  # after step 1's lookahead read 0.95x: AR, jacobi and lookahead alone, on the demo's prompts and settings
    "$PY" -m fastforward bench --model smollm2-135m --dataset mtbench,gsm8k --limit 3 --max-new-tokens 96 \
      --dtype float32 --path auto --compile on --methods ar,jacobi,lookahead --noise-floor \
      --out $OUT/demo_rerun_la.json > $OUT/demo_rerun_la.log 2>&1 ;;
4)  # this CPU's attainable GEMM (float32, bf16) and copy rates
    "$PY" $OUT/peak.py > $OUT/peak.txt ;;
5)  # no cap: the 1.5B in W8A8 (VNNI on this CPU), 1- and 8-token steps interleaved with llama.cpp Q8_0, 4 rounds
    /usr/bin/time -f "wall_s %e maxrss_kb %M" "$PY" -m fastforward.bench.engine_table interleave \
      --model qwen2.5-coder-1.5b --dtype float32 --weights w8a8 --rounds 4 \
      > $OUT/interleave_qwen15_w8a8.txt 2> $OUT/interleave_qwen15_w8a8.log ;;
6)  # no cap: the 1.5B pair in W8A8 (a W8A8 0.5B draft) on HumanEval, 3 prompts, beside llama.cpp Q8_0's AR and
    # its speculative decoding (session 53's script)
    DATASETS=humaneval LIMIT=3 OUT=$OUT PY=$PY bash results/compiled_s53/run_qwen15_w8a8.sh ;;
esac

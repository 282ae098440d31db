#!/bin/bash
# Session 58, 2-vCPU Ice Lake Xeon (AVX-512 + VNNI, no bf16, no AMX), no ISA cap. Nothing else ran.
# Run from the repository root: bash results/compiled_s58/run_s58.sh
#   1. jacobi's gate at its defaults, step by step, AR and jacobi alternated in one process (gate_steps.txt at
#      ba11a4f; gate_trace_a31d233.txt: through the bench's MT-bench turns at a31d233).
#   2. every jacobi-adjacent row with a second AR row (ar:twin, the run's own noise floor), 8 prompts a dataset,
#      128 tokens, beside llama.cpp F32: MT-bench at ba11a4f and a31d233 (bench_mtbench_twin_<rev>.*), then
#      GSM8K, HumanEval and MT-bench at da2999a (bench_<ds>_twin_da2999a.*).
set -x
PY=${PY:-.venv/bin/python}
OUT=results/compiled_s58
PYTHONPATH=src "$PY" $OUT/gate_steps.py > $OUT/gate_steps.txt
PYTHONPATH=src "$PY" $OUT/gate_trace.py > $OUT/gate_trace_$(git rev-parse --short HEAD).txt
for ds in ${DATASETS:-gsm8k humaneval mtbench}; do
  "$PY" -m fastforward bench --model smollm2-135m --dataset "$ds" --limit 8 --max-new-tokens 128 --threads 2 \
    --dtype float32 --path auto --compile on --methods ar,ar:twin,jacobi,lookahead,qsd,layerskip \
    --llamacpp ~/.cache/fastforward/llamacpp --out $OUT/bench_${ds}_twin_$(git rev-parse --short HEAD).json \
    2> $OUT/bench_${ds}_twin_$(git rev-parse --short HEAD).log
done
# 3. jacobi beside AR rows in one process, bench warm-up and turn order (rows_in_one_process_*.txt, at da2999a):
PYTHONPATH=src METHODS=ar,ar:twin,jacobi,qsd,layerskip "$PY" $OUT/rows_in_one_process.py > $OUT/rows_in_one_process_draft_rows.txt
PYTHONPATH=src METHODS=ar,ar:twin,jacobi "$PY" $OUT/rows_in_one_process.py > $OUT/rows_in_one_process_ar_twin_jacobi.txt
# 4. the turn jacobi ran 61 block steps on, decoded with gate=off (gate_off_turn.txt):
PYTHONPATH=src "$PY" $OUT/gate_off_turn.py > $OUT/gate_off_turn.txt
# 5. make demo on a fresh clone (demo_fresh_clone.*: its results/demo.json and demo.md copied here):
#    git clone -b s58 <repo> demo && cd demo && time make demo
# 6. the 8-token step under four GEMM cache blockings (blocking.txt): build each, then alternate
for cfg in "kfull:100,1,1000" "nc4:100,4,1000" "kall:100,1,2000"; do
  TAG=${cfg%%:*} CB=${cfg#*:} MODE=build PYTHONPATH=src "$PY" $OUT/blocking.py; done
for c in 1 2 3; do for t in default kfull nc4 kall; do
  TAG=$t MODE=time ROUNDS=4 PYTHONPATH=src "$PY" $OUT/blocking.py | grep '^{'; done; done   # CB set as above

#!/usr/bin/env bash
# Issue "training-free drafters" measurements on SmolLM2-135M fp32, eager engine -> results/training_free.json:
#  1. ar, pld, lookahead, recycle, suffix (their defaults: cost-sized trees / step gate / gamma_auto) and
#     recycle:static (every step a 25-node recycled tree) on MT-bench, GSM8K held-out and HumanEval, one bench
#     process per dataset (every speedup against the AR of the same process; fp32, so tokens are compared
#     with AR token for token);
#  2. a repeated-request workload: LIMIT HumanEval tasks asked twice in a row (A B C D A B C D), where
#     suffix's global trie holds the first answers when the second round comes.
# Timed: run nothing else meanwhile. About 20 minutes on 2 AVX2 cores for SmolLM2.
# The 1.5B rows: MODEL=qwen2.5-coder-1.5b DATASETS="humaneval gsm8k" TWICE=0 LIMIT=2 EXTRA="--path auto"
# (fp32 prepacked: the kernel path whose 8-token forward is cheapest there). The summary is built from every
# results/training_free_<model>_<dataset>.json present, so runs for several models add up.
set -euo pipefail

MODEL=${MODEL:-smollm2-135m}
LIMIT=${LIMIT:-4}
TOK=${TOK:-128}
OUT=${OUT:-results}
METHODS=${METHODS:-ar,pld,lookahead,recycle,suffix,recycle:static}
DATASETS=${DATASETS:-mtbench gsm8k humaneval}
TWICE=${TWICE:-1}
read -r -a EXTRA_ARGS <<< "${EXTRA:-}"
COMMON=(--model "$MODEL" --dtype float32 --max-new-tokens "$TOK" --methods "$METHODS" "${EXTRA_ARGS[@]}")
[[ "$METHODS" == *recycle:static* ]] && COMMON+=(--opt recycle:static.tree=static)
for ds in $DATASETS; do
  fastforward bench "${COMMON[@]}" --dataset "$ds" --limit "$LIMIT" --out "$OUT/training_free_${MODEL}_${ds}.json"
done

if [[ "$TWICE" == 1 ]]; then
twice="$OUT/training_free_humaneval_twice.jsonl"
python - "$twice" "$LIMIT" <<'PY'
import json, sys
from fastforward.data import load_dataset
path, limit = sys.argv[1], int(sys.argv[2])
tasks = load_dataset("humaneval", limit)
with open(path, "w") as f:
    for _ in range(2):  # the same tasks again, in the same order
        for s in tasks:
            f.write(json.dumps({"prompt": s.turns[0]}) + "\n")
PY
fastforward bench "${COMMON[@]}" --data-path "$twice" --limit $((2 * LIMIT)) \
  --out "$OUT/training_free_${MODEL}_humaneval_twice.json"
fi

python -m fastforward.bench.training_free --bench "$OUT"/training_free_*_*.json --out "$OUT/training_free.json"

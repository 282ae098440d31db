#!/usr/bin/env bash
# Issue "structured output" measurement -> results/structured.json: every method on SmolLM2-135M fp32 with and
# without a JSON-schema constraint (recipes/structured/answer.schema.json), on LIMIT held-out GSM8K problems
# asked to answer as JSON; the same prompts and methods in both runs, each speedup against the AR of its own
# run (constrained AR for the constrained one). Timed: run nothing else meanwhile (~15 min on 2 cores).
set -euo pipefail

MODEL=${MODEL:-smollm2-135m}
LIMIT=${LIMIT:-4}
TOK=${TOK:-128}
OUT=${OUT:-results}
METHODS=${METHODS:-ar,pld,lookahead,jacobi,recycle,suffix,layerskip,qsd}
SCHEMA=recipes/structured/answer.schema.json
prompts="$OUT/structured_prompts.jsonl"
python - "$prompts" "$LIMIT" <<'PY'
import json, sys
from fastforward.data import load_dataset
path, limit = sys.argv[1], int(sys.argv[2])
with open(path, "w") as f:
    for s in load_dataset("gsm8k", limit):  # the held-out part
        ask = (f"{s.turns[0]}\n\nAnswer in JSON with the fields reasoning (a short explanation), "
               "answer (an integer) and confidence (low, medium or high).")
        f.write(json.dumps({"prompt": ask}) + "\n")
PY
COMMON=(--model "$MODEL" --dtype float32 --max-new-tokens "$TOK" --methods "$METHODS" --data-path "$prompts" --limit "$LIMIT")
fastforward bench "${COMMON[@]}" --json-schema "$SCHEMA" --out "$OUT/structured_${MODEL}_schema.json"
fastforward bench "${COMMON[@]}" --out "$OUT/structured_${MODEL}_free.json"
python -m fastforward.bench.structured --schema "$OUT/structured_${MODEL}_schema.json" \
  --free "$OUT/structured_${MODEL}_free.json" --out "$OUT/structured.json"

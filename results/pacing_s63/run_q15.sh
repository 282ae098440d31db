#!/bin/bash
# the 1.5B in W8A8, HumanEval: pld keyed (by_match, the new default) vs pooled, beside ar and suffix
cd "$(git rev-parse --show-toplevel)"  # ran on a frozen copy of da2c4f2 (git archive | tar -x), with PYTHONPATH=src
PYTHONPATH=src .venv/bin/python -m fastforward bench --model qwen2.5-coder-1.5b --dataset humaneval --limit 3 \
  --max-new-tokens 128 --threads 2 --dtype float32 --weights w8a8 --path auto --compile on --buckets 1,4,8 \
  --methods ar,pld,pld:pooled,pld:ng2,suffix --opt pld:pooled.by_match=false --opt pld:ng2.ngram_min=2 \
  --out results/pacing_s63/q15_pld_keyed.json

#!/bin/bash
# SmolLM2 fp32 compiled: pld keyed (by_match, the new default) vs pooled, one process per dataset set
cd "$(git rev-parse --show-toplevel)"  # ran on a frozen copy of da2c4f2 (git archive | tar -x), with PYTHONPATH=src
PYTHONPATH=src .venv/bin/python -m fastforward bench --model smollm2-135m --dataset mtbench,gsm8k,humaneval --limit 8 \
  --max-new-tokens 128 --threads 2 --dtype float32 --path auto --compile on \
  --methods ar,pld,pld:pooled,suffix --opt pld:pooled.by_match=false --out results/pacing_s63/smol_pld_keyed.json

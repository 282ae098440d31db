#!/usr/bin/env bash
# Issue 32, session 48 (2-vCPU AMD EPYC family 25 model 17, AVX-512 with bf16, no AMX): SmolLM2 bf16, every
# method, llama.cpp BF16 in the same process, 8 prompts a dataset, three full runs in turn: huge pages on
# (the default since f8b9a0a), off (FASTFORWARD_HUGE_PAGES=0), on again. Run from the repository root.
set -euo pipefail
for run in huge nohuge huge2; do
  if [ "$run" = nohuge ]; then export FASTFORWARD_HUGE_PAGES=0; else unset FASTFORWARD_HUGE_PAGES; fi
  DTYPE=bfloat16 TAG=epyc_bf16_8p_$run LIMIT=8 OUT=results/compiled_s48 bash results/compiled_s44/run_smollm2.sh
done

#!/usr/bin/env bash
# Cheaper drafts for Qwen2.5-Coder-1.5B-Instruct (issue 13), one run beside its own AR and float-draft sd:
# the 0.5B draft as loaded (sd), its int4 weight-only copy (sd:q4), int4 with a 32k-token head (sd:q4v),
# int4 with the draft length chosen from measured costs (sd:q4a), and SmolLM2-135M int4 drafting across
# tokenizers (sd-cross:q4). 128 new tokens, 20 generations per dataset (MT-bench: 10 questions x 2 turns),
# then the fp32 exactness check. Resumable like recipes/cpu_speed_qwen15.sh. ~1 h on a 2-core AVX-512 CPU.
# `gamma_auto=false`: the fixed gamma these results were measured with outside the :a variants (session 19
# made gamma_auto the default).
set -euo pipefail
OUT=${OUT:-results/cpu_speed_drafts.json}
for m in qwen2.5-coder-1.5b qwen2.5-coder-0.5b smollm2-135m; do fastforward models pull "$m"; done
ARGS=(--model qwen2.5-coder-1.5b --max-new-tokens 128 --out "$OUT" --opt gamma_auto=false
      --methods ar,sd,sd:q4,sd:q4v,sd:q4a,sd-cross:q4
      --opt sd:q4.draft_bits=4 --opt sd:q4v.draft_bits=4 --opt sd:q4v.vocab=32768
      --opt sd:q4a.draft_bits=4 --opt sd:q4a.gamma_auto=true --opt sd-cross:q4.draft_bits=4)
fastforward cpu-speed "${ARGS[@]}" --datasets gsm8k,humaneval --limit 20
fastforward cpu-speed "${ARGS[@]}" --datasets mtbench --limit 10

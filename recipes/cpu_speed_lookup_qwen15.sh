#!/usr/bin/env bash
# Lookup first, int4 draft elsewhere (issue 13), on Qwen2.5-Coder-1.5B-Instruct beside its own AR, pld and the
# int4 draft alone: sd:q4a (int4 0.5B draft, gamma from measured costs), sd:q4l (lookup_first, gamma 5),
# sd:q4al (lookup_first + gamma_auto). MT-bench first (10 questions x 2 turns), then GSM8K held-out and
# HumanEval (20 each), 128 new tokens, then the fp32 exactness check. Resumable like
# recipes/cpu_speed_qwen15.sh. ~1 h on a 2-core AVX-512 CPU.
# `gamma_auto=false`: the fixed gamma these results were measured with outside the :a variants (session 19
# made gamma_auto the default).
set -euo pipefail
OUT=${OUT:-results/cpu_speed_lookup.json}
for m in qwen2.5-coder-1.5b qwen2.5-coder-0.5b; do fastforward models pull "$m"; done
ARGS=(--model qwen2.5-coder-1.5b --max-new-tokens 128 --out "$OUT" --opt gamma_auto=false
      --methods ar,pld,sd:q4a,sd:q4l,sd:q4al
      --opt sd:q4a.draft_bits=4 --opt sd:q4a.gamma_auto=true
      --opt sd:q4l.draft_bits=4 --opt sd:q4l.lookup_first=true
      --opt sd:q4al.draft_bits=4 --opt sd:q4al.lookup_first=true --opt sd:q4al.gamma_auto=true)
fastforward cpu-speed "${ARGS[@]}" --datasets mtbench --limit 10
fastforward cpu-speed "${ARGS[@]}" --datasets gsm8k,humaneval --limit 20

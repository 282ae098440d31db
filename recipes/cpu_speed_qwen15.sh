#!/usr/bin/env bash
# Issue 13's study on Qwen2.5-Coder-1.5B-Instruct: k-token forward cost curves per dtype/kernel path, then
# every method on the cheapest verify configuration beside AR in the same configuration, 128 new tokens,
# 20 generations per dataset (MT-bench: 10 questions x 2 turns), drafts: Qwen2.5-Coder-0.5B (sd,
# hf_assisted), the target's own int4 copy (qsd), SmolLM2-135M (sd-cross); then the fp32 exactness check.
# Resumable: run it again after an interruption (finished turns are kept in results/cpu_speed.*.samples.jsonl;
# a resumed dataset must run on the same machine). ~1.5 h on a 2-core AVX-512 CPU.
# `gamma_auto=false gate=off`: the fixed schedules these results were measured with (session 19 made
# gamma_auto and the Jacobi/lookahead step gate the defaults; drop both options to run today's defaults).
set -euo pipefail
OUT=${OUT:-results/cpu_speed.json}
for m in qwen2.5-coder-1.5b qwen2.5-coder-0.5b smollm2-135m; do fastforward models pull "$m"; done
fastforward cpu-speed --model qwen2.5-coder-1.5b --datasets gsm8k,humaneval --limit 20 \
    --max-new-tokens 128 --opt qsd.bits=4 --opt gamma_auto=false --opt gate=off --out "$OUT"
fastforward cpu-speed --model qwen2.5-coder-1.5b --datasets mtbench --limit 10 \
    --max-new-tokens 128 --opt qsd.bits=4 --opt gamma_auto=false --opt gate=off --out "$OUT"

#!/usr/bin/env bash
# Issue 32: a user's start-up with --compile on, whole command wall time (model load, compile or load of
# the 1-token package, prefill, 32 tokens): eager; compiled with an empty package store (cold first start);
# compiled again (cached start). Prints one JSON line. Machine must be quiet.
#   bash results/compile_startup/process_start.sh > results/compile_startup/process_start_<isa>.json
# FF: the fastforward command, split on spaces (default .venv/bin/fastforward; e.g. "python -m fastforward"
# from a frozen copy of the tree); PY: the python that reads the ISA (default .venv/bin/python); REV: the
# revision to record where the tree is no git checkout.
set -euo pipefail
FF=${FF:-.venv/bin/fastforward}
CACHE=${FASTFORWARD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fastforward}
COLD=$(mktemp -d)
ln -s "$CACHE/models" "$COLD/models"  # the pulled model, not its packages
run() {  # wall seconds of one generate
  local t0 t1
  t0=$(date +%s.%N)
  "$@" > /dev/null 2>&1
  t1=$(date +%s.%N)
  echo "$t1 - $t0" | bc
}
ARGS=(generate --model smollm2-135m --dtype float32 --path default --threads 2 --max-new-tokens 32
      "Write one sentence about the sea.")
eager=$(run $FF "${ARGS[@]}" --compile off)
cold=$(FASTFORWARD_CACHE=$COLD run $FF "${ARGS[@]}" --compile on)
cached=$(FASTFORWARD_CACHE=$COLD run $FF "${ARGS[@]}" --compile on)
size=$(du -sb "$COLD/compiled" | cut -f1)
rm -rf "$COLD"
isa=$(${PY:-.venv/bin/python} -c 'import torch; print(torch.backends.cpu.get_cpu_capability())')
printf '{"eager_s": %.1f, "cold_first_start_s": %.1f, "cached_start_s": %.1f, "package_bytes": %s, "isa": "%s", "onednn_cap": "%s", "revision": "%s"}\n' \
  "$eager" "$cold" "$cached" "$size" "$isa" "${ONEDNN_MAX_CPU_ISA:-}" "$(echo ${REV:-$(git rev-parse --short HEAD)})"

#!/bin/bash
# Session 63: the 2+-token W8A8 packages before (872bded: oneDNN's prepacked linear) and after (38b29bf: short K on
# inductor's template in the shifted form), the 1.5B; nothing else running. Packages built by warm.sh beforehand.
set -x
S=/root/.cache/fastforward/compiled; OLD=$S/4f44eb59cea7c812; NEW=$S/04b9ec65233a2fd7; O=/tmp/s63/meas; mkdir -p $O
cd /tmp/s63/new
for k in 4 8; do
  K=$k LHD=28,2,128 PYTHONPATH=src .venv/bin/python /work/main/results/compiled_s62/ab_k1.py old=$OLD/k$k-s512.pt2 shift=$NEW/k$k-s512.pt2 > $O/ab_k${k}_qwen15.txt 2>&1
done
for v in new old; do
  cd /tmp/s63/$v
  PYTHONPATH=src DATASETS=humaneval LIMIT=3 METHODS=ar,pld,suffix,sd OUT=$O/$v PY=.venv/bin/python LLAMACPP=/root/.cache/fastforward/llamacpp bash -c 'mkdir -p $OUT; bash results/compiled_s53/run_qwen15_w8a8.sh'
done
echo ALLDONE

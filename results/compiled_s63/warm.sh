#!/bin/bash
# build the packages (timings discarded): new copy, then old copy
for v in new old; do
  cd /tmp/s63/$v
  PYTHONPATH=src DATASETS=humaneval LIMIT=1 METHODS=ar,pld,sd OUT=/tmp/s63/warm/$v PY=.venv/bin/python LLAMACPP=/root/.cache/fastforward/llamacpp bash -c 'mkdir -p $OUT; bash results/compiled_s53/run_qwen15_w8a8.sh' || echo "FAILED $v"
  echo "done $v $(date)"
done

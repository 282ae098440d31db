#!/bin/bash
while kill -0 29587 2>/dev/null; do sleep 5; done
O=/tmp/s63/meas
grep -o "compiled/[0-9a-f]*" $O/smolw8_warm_new.log | sort -u > $O/smolw8_dir_new.txt
cd /tmp/s63/old
PYTHONPATH=src .venv/bin/python -m fastforward bench --model smollm2-135m --dataset humaneval --limit 1 --max-new-tokens 32 \
  --threads 2 --dtype float32 --weights w8a8 --path auto --compile on --buckets 1,4,8 --methods ar,pld --opt pld.gamma_auto=false \
  --out $O/smolw8_warm_old.json > $O/smolw8_warm_old.log 2>&1
grep -o "compiled/[0-9a-f]*" $O/smolw8_warm_old.log | sort -u > $O/smolw8_dir_old.txt
echo BUILT $(date)

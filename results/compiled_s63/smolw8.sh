#!/bin/bash
# SmolLM2 W8A8: build the 4- and 8-token packages of old (872bded) and new (38b29bf) copies, then A/B them
S=/root/.cache/fastforward/compiled; O=/tmp/s63/meas; mkdir -p $O
for v in new old; do
  cd /tmp/s63/$v
  PYTHONPATH=src .venv/bin/python -m fastforward bench --model smollm2-135m --dataset humaneval --limit 1 --max-new-tokens 32 \
    --threads 2 --dtype float32 --weights w8a8 --path auto --compile on --buckets 1,4,8 --methods ar,pld --opt pld.gamma_auto=false \
    --out $O/smolw8_warm_$v.json > $O/smolw8_warm_$v.log 2>&1
  grep -o "compiled/[0-9a-f]*" $O/smolw8_warm_$v.log | sort -u > $O/smolw8_dir_$v.txt
done
NEWD=$S/$(head -1 $O/smolw8_dir_new.txt | cut -d/ -f2); OLDD=$S/$(head -1 $O/smolw8_dir_old.txt | cut -d/ -f2)
echo "old $OLDD new $NEWD"
cd /tmp/s63/new
for k in 4 8; do
  K=$k LHD=30,3,64 PYTHONPATH=src .venv/bin/python /work/main/results/compiled_s62/ab_k1.py old=$OLDD/k$k-s512.pt2 shift=$NEWD/k$k-s512.pt2 > $O/ab_k${k}_smollm2.txt 2>&1
done
echo ALLDONE

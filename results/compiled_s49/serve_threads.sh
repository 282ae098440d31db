#!/usr/bin/env bash
# Server AR speed by torch thread count (session 49): serve, then 1 warm-up + 6 GSM8K chat requests of 128 tokens, sequential.
cd /work/main
for mode in t1 t2; do
  unset FASTFORWARD_HUGE_PAGES
  .venv/bin/fastforward serve --model smollm2-135m --dtype bfloat16 --compile on --method ar --port 8765 --threads ${mode#t} > /tmp/s49/serve_$mode.log 2>&1 &
  pid=$!
  for i in $(seq 1 120); do curl -s -o /dev/null http://127.0.0.1:8765/v1/models && break; sleep 1; done
  .venv/bin/python - "$mode" <<'PY'
import json, sys, time, httpx
from fastforward.data import load_dataset
prompts = [s for s in load_dataset("gsm8k", limit=6)]
c = httpx.Client(timeout=300)
def ask(p):
    text = p.turns[0] if hasattr(p, "turns") else p.prompt
    t0 = time.perf_counter()
    r = c.post("http://127.0.0.1:8765/v1/chat/completions", json={"model": "smollm2-135m", "messages": [{"role": "user", "content": text}], "max_tokens": 128, "temperature": 0})
    return r.json()["usage"]["completion_tokens"], time.perf_counter() - t0
ask(prompts[0])  # warm-up
toks = secs = 0
for p in prompts:
    n, s = ask(p); toks += n; secs += s
print(sys.argv[1], f"{toks} tokens in {secs:.2f} s = {toks/secs:.1f} tok/s")
PY
  kill $pid; wait $pid 2>/dev/null
  grep -E "2 MB pages|loaded from" /tmp/s49/serve_$mode.log | head -3
done

#!/usr/bin/env bash
# Server AR speed: serve (code from $1), then 1 warm-up + 6 GSM8K chat requests of 128 tokens, sequential.
SRC=$1; TAG=$2; METHOD=${METHOD:-ar}
cd /work/main
PYTHONPATH=$SRC .venv/bin/python -m fastforward serve --model smollm2-135m --dtype bfloat16 --compile on --method $METHOD --port 8765 > /tmp/s50/serve_$TAG.log 2>&1 &
pid=$!
for i in $(seq 1 300); do curl -s -o /dev/null http://127.0.0.1:8765/v1/models && break; sleep 1; done
.venv/bin/python - "$TAG" <<'PY'
import json, sys, time, httpx
from fastforward.data import load_dataset
prompts = [s for s in load_dataset("gsm8k", limit=6)]
c = httpx.Client(timeout=600)
def ask(p):
    text = p.turns[0] if hasattr(p, "turns") else p.prompt
    t0 = time.perf_counter()
    r = c.post("http://127.0.0.1:8765/v1/chat/completions", json={"model": "smollm2-135m", "messages": [{"role": "user", "content": text}], "max_tokens": 128, "temperature": 0})
    return r.json()["usage"]["completion_tokens"], time.perf_counter() - t0
ask(prompts[0])  # warm-up
toks = secs = 0
for p in prompts:
    n, s = ask(p); toks += n; secs += s
print(sys.argv[1], f"{toks} tokens in {secs:.2f} s = {toks/secs:.1f} tok/s", flush=True)
PY
kill -INT $pid; wait $pid 2>/dev/null
grep -E "2 MB pages|loaded from|compiling" /tmp/s50/serve_$TAG.log | head -4

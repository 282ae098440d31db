#!/usr/bin/env bash
# Does a structured-output request slow the server's later requests? (session 50)
SRC=$1; TAG=$2; METHOD=${METHOD:-ar}
cd /work/main
PYTHONPATH=$SRC .venv/bin/python -m fastforward serve --model smollm2-135m --dtype bfloat16 --compile on --method $METHOD --port 8765 > /tmp/s50/serve_$TAG.log 2>&1 &
pid=$!
for i in $(seq 1 300); do curl -s -o /dev/null http://127.0.0.1:8765/v1/models && break; sleep 1; done
.venv/bin/python - "$TAG" <<'PY'
import sys, time, httpx
from fastforward.data import load_dataset
prompts = [s for s in load_dataset("gsm8k", limit=4)]
c = httpx.Client(timeout=600)
def ask(p, **extra):
    text = p.turns[0] if hasattr(p, "turns") else p.prompt
    t0 = time.perf_counter()
    r = c.post("http://127.0.0.1:8765/v1/chat/completions", json={"model": "smollm2-135m", "messages": [{"role": "user", "content": text}], "max_tokens": 128, "temperature": 0, **extra})
    r.raise_for_status()
    return r.json()["usage"]["completion_tokens"], time.perf_counter() - t0
def speed(label):
    toks = secs = 0
    for p in prompts[1:]:
        n, s = ask(p); toks += n; secs += s
    print(sys.argv[1], label, f"{toks / secs:.1f} tok/s", flush=True)
ask(prompts[0])
speed("before a json_schema request")
schema = {"type": "object", "properties": {"answer": {"type": "integer"}, "why": {"type": "string"}}, "required": ["answer", "why"]}
n, s = ask(prompts[0], response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": schema}})
print(sys.argv[1], f"json_schema request: {n} tokens in {s:.2f} s", flush=True)
speed("after it")
PY
kill -INT $pid; wait $pid 2>/dev/null

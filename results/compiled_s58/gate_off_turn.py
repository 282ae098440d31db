"""The turn where jacobi ran 61 block steps in a row in the a31d233 MT-bench run (mtbench-83, second turn, AR's first
answer as the bench gave it), decoded with gate=off: the tokens every block step commits (deterministic), and
their means over windows of 4, 8 and 16 steps. A block of 16 costs ~1.8 AR steps here (session 58).
`PYTHONPATH=src python results/compiled_s58/gate_off_turn.py > results/compiled_s58/gate_off_turn.txt`"""
import json
from fastforward.core.decoder import GenerationConfig
from fastforward.data import load_dataset
from fastforward.data.base import render_prompt
from fastforward.decoders.registry import build_decoder
from fastforward.core import pacing
from fastforward.models.loading import load_model
lm = load_model("smollm2-135m", "float32", path="default", threads=1)
s = [x for x in load_dataset("mtbench", limit=8) if x.id == "mtbench-83"][0]
b = json.load(open("results/compiled_s58/bench_mtbench_twin_a31d233.json"))
first = [p for p in b["methods"]["ar"]["per_sample"] if p["id"] == "mtbench-83" and p["turn"] == 0][0]["text"]
msgs = [{"role": "user", "content": s.turns[0]}, {"role": "assistant", "content": first}, {"role": "user", "content": s.turns[1]}]
ids = render_prompt(lm.tokenizer, msgs)
toks = []
rec = pacing.StepGate.record
def logged(self, parallel, tokens, ms):
    toks.append(tokens); rec(self, parallel, tokens, ms)
pacing.StepGate.record = logged
for gate in ("off",):
    d = build_decoder("jacobi", lm, None, {"gate": gate})
    out = d.generate(ids, GenerationConfig(max_new_tokens=128))
    print(gate, len(out.tokens), out.stats.target_forwards)
print(toks)
# EMA 0.9 as the gate keeps it, starting from a burst mean
import statistics
for w in (4, 8, 16):
    print(w, [round(statistics.mean(toks[i:i+w]),2) for i in range(0, len(toks), w)])

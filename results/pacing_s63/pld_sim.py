"""Greedy outputs of SmolLM2 (HF generate, eager fp32), then prompt lookup simulated on them: per matched
n-gram length, how many drafted tokens the verifier would accept (acceptance by match length and depth)."""
import json, sys, collections, torch
from fastforward.models.loading import load_model
from fastforward.data import load_dataset
from fastforward.data.base import render_prompt
from fastforward.decoders.ngram import NGramIndex
torch.set_num_threads(2)
model_name = sys.argv[1]; limit = int(sys.argv[2]); out = sys.argv[3]
lm = load_model(model_name, dtype="float32")
recs = []
for ds in ("mtbench", "gsm8k", "humaneval"):
    for s in load_dataset(ds, limit=limit):
        ids = render_prompt(lm.tokenizer, [{"role": "user", "content": s.turns[0]}])
        with torch.no_grad():
            g = lm.model.generate(torch.tensor([ids]), max_new_tokens=128, do_sample=False)
        recs.append({"dataset": ds, "prompt": ids, "out": g[0, len(ids):].tolist()})
        print(ds, len(recs), file=sys.stderr, flush=True)
json.dump(recs, open(out, "w"))

"""Share of the counting corpus's tokens that the top-K draft vocabulary covers (docs/results.md, vocab=K).

Usage: python scripts/vocab_coverage.py [MODEL] (default smollm2-135m)."""

from __future__ import annotations

import sys

from fastforward.core.vocab import rank_subset
from fastforward.data.vocab_corpus import corpus_counts
from fastforward.models.loading import load_model

model = load_model(sys.argv[1] if len(sys.argv) > 1 else "smollm2-135m", "float32")
rows = model.model.get_output_embeddings().weight.shape[0]
counts = corpus_counts(model.tokenizer, rows)
print(f"{model.name}: {int(counts.sum())} corpus tokens, {int((counts > 0).sum())} distinct ids of {rows}")
for k in (2048, 4096, 8192, 16384, 32768):
    if k < rows:
        share = float(counts[rank_subset(counts, k, model.eos_token_ids).ids].sum() / counts.sum())
        print(f"K={k}: {100 * share:.1f}%")

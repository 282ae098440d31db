"""How good is a trained Chimera draft: head accuracy on held-out data, then decoding held-out prompts.

Two measures, as ``train-chimera --eval`` reports them:

- head top-1..5 accuracy, teacher-forced over held-out self-distillation records (collected here, with the
  same settings as the training data, into ``DATA/heldout``);
- greedy decoding of the first few held-out prompts with :class:`~fastforward.decoders.chimera.ChimeraDecoder`
  (the default tree and a plain chain), each checked token for token against :class:`ARDecoder`: tokens per
  target forward, accepted tokens per head and the trigram-cache hit rate, summed over prompts.

It sits in ``bench`` (not ``chimera``) because it runs decoders, which the draft-model package must not import.
Timed, side-by-side speed is ``bench``'s runner's job; these are counts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastforward.chimera.data import DistillConfig, collect_distill_data, load_record, records
from fastforward.chimera.model import ChimeraDraft
from fastforward.chimera.train import head_topk_accuracy
from fastforward.core.decoder import GenerationConfig
from fastforward.core.metrics import DecodeTotals
from fastforward.decoders.ar import ARDecoder
from fastforward.decoders.chimera import ChimeraDecoder, ChimeraOptions
from fastforward.models.loading import LoadedModel


def evaluate_draft(
    target: LoadedModel,
    draft: ChimeraDraft,
    data: str | Path,
    eval_prompts: int = 16,
    eval_decode: int = 4,
    max_new_tokens: int = 128,
    gen_batch_size: int = 8,
) -> dict[str, Any]:
    """Head top-k accuracy on ``eval_prompts`` held-out records + greedy decoding of ``eval_decode`` of them.

    ``eval_decode <= 0`` skips decoding (head accuracy only). Returns the ``train-chimera --eval`` report:
    target, dtype, draft config, ``head_topk``/``positions``, ``decode`` (one entry per tree),
    ``mean_accepted_tokens`` and ``identical_to_ar`` ("k/n") of the default tree.
    """
    half = eval_prompts // 2
    hcfg = DistillConfig(
        sharegpt=half,
        gsm8k=eval_prompts - half,
        max_new_tokens=max_new_tokens,
        heldout=True,
        gen_batch_size=gen_batch_size,
    )
    held = collect_distill_data(target, Path(data) / "heldout", hcfg)
    report: dict[str, Any] = {"target": target.name, "dtype": target.dtype, "draft": draft.cfg.to_dict()}
    report.update(head_topk_accuracy(draft, held))
    cfg = GenerationConfig(max_new_tokens=max_new_tokens, eos_token_ids=target.eos_token_ids)
    ar = ARDecoder(target.model)
    if eval_decode <= 0:  # head accuracy only; decoding is measured by `bench` instead
        report.update(decode=[], mean_accepted_tokens=None, identical_to_ar=None)
        return report
    runs = []
    for tree in ("default", "chain"):
        dec = ChimeraDecoder(target.model, draft, ChimeraOptions(tree=tree))
        t = DecodeTotals()
        for path in records(held)[:eval_decode]:
            rec = load_record(path)
            prompt = rec["ids"][: rec["prompt_len"]].tolist()
            res = dec.generate(prompt, cfg)
            t.add(res.stats, identical=res.tokens == ar.generate(prompt, cfg).tokens)
        ex = t.extras
        runs.append(
            {
                "tree": tree,
                "prompts": eval_decode,
                "new_tokens": t.new_tokens,
                "target_forwards": t.target_forwards,
                "mean_accepted_tokens": round(t.mean_accepted_tokens or 0.0, 3),
                "identical_to_ar": t.identical,
                "head_accepted": ex.get("head_accepted", [0] * draft.cfg.num_heads),
                "trigram_cache_hit_rate": round(
                    ex.get("trigram_cache_hits", 0) / max(1, ex.get("trigram_cache_lookups", 0)), 3
                ),
            }
        )
    report["decode"] = runs
    report["mean_accepted_tokens"] = runs[0]["mean_accepted_tokens"]
    report["identical_to_ar"] = f"{runs[0]['identical_to_ar']}/{eval_decode}"
    return report

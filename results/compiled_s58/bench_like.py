"""The set-up the session-58 probe scripts share (gate_steps.py, gate_trace.py, rows_in_one_process.py):
SmolLM2 float32 on the compiled packages of the user's cache, 8 MT-bench samples, 128 tokens, and the
decoders of ``methods`` warmed as ``fastforward bench`` warms them (every graph, a 16-token generation each,
estimates reopened; ``settle``: then the weights onto 2 MB pages, as the bench does before timing)."""

from fastforward.bench.runner import cache_sizes, settle_pages, warm_graphs
from fastforward.core.compiled import inductor_cache
from fastforward.core.decoder import GenerationConfig
from fastforward.core.engine import compile_forward
from fastforward.data import load_dataset
from fastforward.data.base import render_prompt
from fastforward.decoders.registry import build_decoders
from fastforward.models.cache import cache_root, compiled_dir
from fastforward.models.loading import load_model


def setup(methods: str, settle: bool = False):
    """(the loaded model, the samples, the generation config, the warmed decoders by label)."""
    inductor_cache(str(cache_root()))
    lm = load_model("smollm2-135m", "float32", path="default", threads=2)
    compile_forward(lm.model, store=compiled_dir())
    samples = list(load_dataset("mtbench", limit=8))
    cfg = GenerationConfig(max_new_tokens=128)
    decs = build_decoders(methods, lm, None, {})
    warm_graphs(lm, decs, cache_sizes(lm, samples, cfg.max_new_tokens))
    first = render_prompt(lm.tokenizer, [{"role": "user", "content": samples[0].turns[0]}])
    for d in decs.values():
        d.generate(first, GenerationConfig(max_new_tokens=16))
        d.reopen_estimates()
    if settle:
        settle_pages()
    return lm, samples, cfg, decs

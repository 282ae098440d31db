"""Where a gated method's time goes, step by step, beside compiled AR (issue 32, "no default below compiled AR").

Times every target forward by its width and every whole step (propose + forward + accept + commit + observe)
by its kind, for compiled AR and the methods named, on the same prompts in one process, interleaved
per prompt, warm-up excluded. Prints per method: steps, ms per AR step, ms per parallel step and its width,
and what the parallel steps and the per-step overhead cost against AR.

    .venv/bin/python results/compiled_s33/step_costs.py --dataset humaneval --limit 3 jacobi lookahead layerskip qsd
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import defaultdict

import torch

from fastforward.cli.common import compile_target
from fastforward.core import batching
from fastforward.core.decoder import GenerationConfig
from fastforward.data import load_dataset, render_prompt
from fastforward.decoders.registry import build_decoder
from fastforward.models.loading import load_model


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("methods", nargs="+")
    ap.add_argument("--dataset", default="humaneval")
    ap.add_argument("--limit", type=int, default=3)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--out")
    a = ap.parse_args()
    torch.set_num_threads(2)
    target = load_model("smollm2-135m", a.dtype, "cpu", 2, "default")
    compile_target(target, a.tokens)
    names = ["ar", *a.methods]
    decoders = {n: build_decoder(n, target, None, {}) for n in names}
    cfg = GenerationConfig(max_new_tokens=a.tokens, eos_token_ids=tuple(target.eos_token_ids))
    _samples = load_dataset(a.dataset, a.limit)
    prompts = [render_prompt(target.tokenizer, [{"role": "user", "content": s.turns[0]}]) for s in _samples]
    steps: dict[str, list[tuple[int, float]]] = defaultdict(list)  # method -> (fed width, step ms)
    forwards: dict[str, list[tuple[int, float]]] = defaultdict(list)  # method -> (fed width, model call ms)
    current = {"name": ""}
    inner = batching.verify_step

    def timed(engine, proposer, rows, pad, commit, stats=None):
        t0 = time.perf_counter()
        width = {}
        fwd = engine.forward

        def spy(blocks, *args, **kw):
            width["k"] = max(len(b.tokens) for b in blocks)
            out = fwd(blocks, *args, **kw)
            width["ms"] = out.ms
            return out

        engine.forward = spy
        try:
            return inner(engine, proposer, rows, pad, commit, stats)
        finally:
            del engine.forward
            steps[current["name"]].append((width.get("k", 0), (time.perf_counter() - t0) * 1e3))
            forwards[current["name"]].append((width.get("k", 0), width.get("ms", 0.0)))

    batching.verify_step = timed
    from fastforward.bench.runner import cache_sizes, warm_graphs
    warm_graphs(target, decoders, cache_sizes(target, _samples, a.tokens))
    with torch.inference_mode():
        for n in names:  # warm-up
            current["name"] = n
            decoders[n].generate(prompts[0], GenerationConfig(max_new_tokens=16, eos_token_ids=cfg.eos_token_ids))
            decoders[n].reopen_estimates()
        steps.clear()
        forwards.clear()
        wall: dict[str, float] = defaultdict(float)
        toks: dict[str, int] = defaultdict(int)
        for i, ids in enumerate(prompts):
            order = names[i % len(names):] + names[: i % len(names)]
            for n in order:
                current["name"] = n
                out = decoders[n].generate(ids, cfg)
                wall[n] += out.stats.wall_time_s
                toks[n] += out.stats.new_tokens
    report = {}
    ar_ms = statistics.median(ms for k, ms in steps["ar"])
    for n in names:
        s = steps[n]
        one = [ms for k, ms in s if k == 1]
        wide = [(k, ms) for k, ms in s if k > 1]
        r = {
            "tokens_per_s": toks[n] / wall[n],
            "vs_ar": (toks[n] / wall[n]) / (toks["ar"] / wall["ar"]),
            "steps": len(s),
            "ar_steps": len(one),
            "ar_step_ms_median": statistics.median(one) if one else None,
            "ar_step_ms_mean": statistics.fmean(one) if one else None,
            "parallel_steps": len(wide),
            "parallel_width_mean": statistics.fmean(k for k, _ in wide) if wide else None,
            "parallel_step_ms_mean": statistics.fmean(ms for _, ms in wide) if wide else None,
            "step_ms_total": sum(ms for _, ms in s),
            "wall_ms_outside_steps": wall[n] * 1e3 - sum(ms for _, ms in s),
            "new_tokens": toks[n],
        }
        if one:
            r["ar_step_overhead_ms_total"] = sum(one) - len(one) * ar_ms
            f1 = [ms for k, ms in forwards[n] if k == 1]
            r["ar_forward_ms_median"] = statistics.median(f1)
            r["ar_step_outside_forward_ms_median"] = statistics.median(
                st - f for (k, st), (_, f) in zip(s, forwards[n], strict=True) if k == 1)
        if wide:
            r["parallel_excess_ms_total"] = sum(ms for _, ms in wide) - len(wide) * ar_ms
        r["first_steps"] = [(k, round(ms, 1)) for k, ms in s[:40]]
        report[n] = r
        print(n, json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in r.items()}))
    if a.out:
        from fastforward import hardware

        with open(a.out, "w") as f:
            json.dump({"hardware": hardware.describe(), **hardware.provenance(), "dataset": a.dataset,
                       "dtype": a.dtype, "methods": report}, f, indent=1)


if __name__ == "__main__":
    main()

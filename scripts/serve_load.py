"""Load test of ``fastforward serve``: concurrent streaming clients on loopback, per decoding method.

What it answers: does the server stay correct under concurrency (0 errors; every greedy fp32 reply token
for token the same as offline greedy AR), and what do clients see (time to first token, tokens per second
per client and in aggregate) when 16 of them share one model worker.

How: the model is loaded once; offline greedy AR gives the reference tokens of every prompt; then, for each
method, an in-process server on 127.0.0.1 and an ephemeral port (never another host) takes ``--clients``
concurrent clients, each sending ``--requests`` streamed chat requests one after another (distinct MT-bench
and GSM8K prompts, ``max_tokens`` fixed, EOS honoured). Bounded: a fixed number of requests, a per-request
timeout and a wall-clock limit for the whole run (requests still open at the limit count as errors).

Definitions in the output (results/serve.json):
  ttft_p50_s / ttft_p95_s   request sent -> first content chunk, over all requests of the method
  per_client_tok_s          mean over clients of (tokens received / seconds the client spent in requests)
  aggregate_tok_s           all tokens of the method / wall time of its phase
  identical_to_offline      every reply's token ids (extension ``return_token_ids``) == offline greedy AR
After the run it scrapes /metrics and stores the per-method spec-decode counters next to the figures.

    .venv/bin/python scripts/serve_load.py --out results/serve.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from fastforward import hardware
from fastforward.core.decoder import GenerationConfig
from fastforward.data import load_dataset, render_prompt
from fastforward.decoders.registry import build_decoder
from fastforward.models.loading import LoadedModel, load_model
from fastforward.serve.app import BackgroundServer, create_app
from fastforward.serve.engine import Engine, in_own_thread


@dataclass
class Outcome:
    """One streamed request as its client saw it."""

    prompt: int
    start: float
    first: float | None = None
    end: float | None = None
    tokens: int = 0
    token_ids: list[int] = field(default_factory=list)
    error: str | None = None


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 100]); 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, round(q / 100 * len(ordered) + 0.5 - 1e-9))
    return ordered[min(rank, len(ordered)) - 1]


def prompts_for(lm: LoadedModel, n: int) -> list[tuple[str, list[int]]]:
    """``n`` distinct real prompts (MT-bench first turns, then GSM8K held-out) and their rendered ids."""
    samples = load_dataset("mtbench", n) + load_dataset("gsm8k", n)
    texts = list(dict.fromkeys(s.turns[0] for s in samples))[:n]
    if len(texts) < n:
        raise SystemExit(f"only {len(texts)} distinct prompts available, {n} needed")
    return [(t, render_prompt(lm.tokenizer, [{"role": "user", "content": t}])) for t in texts]


async def one_request(
    http: httpx.AsyncClient, url: str, method: str, prompt: str, index: int, max_tokens: int, timeout: float
) -> Outcome:
    body = {
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
        "fastforward": {"method": method, "return_token_ids": True},
    }
    out = Outcome(index, time.perf_counter())
    done = False
    try:
        async with asyncio.timeout(timeout):
            async with http.stream("POST", url + "/v1/chat/completions", json=body) as resp:
                if resp.status_code != 200:
                    out.error = f"HTTP {resp.status_code}: {(await resp.aread())[:200]!r}"
                    return out
                async for line in resp.aiter_lines():
                    if not line.startswith("data: "):
                        continue
                    if line == "data: [DONE]":
                        done = True
                        break
                    chunk = json.loads(line[6:])
                    if "error" in chunk:
                        out.error = chunk["error"]["message"]
                        break
                    if chunk.get("choices") and chunk["choices"][0].get("delta", {}).get("content"):
                        out.first = out.first or time.perf_counter()
                    if chunk.get("fastforward"):
                        out.token_ids = chunk["fastforward"].get("token_ids", [])
                    if chunk.get("usage"):
                        out.tokens = chunk["usage"]["completion_tokens"]
    except TimeoutError:
        out.error = "timed out"
    except httpx.HTTPError as e:
        out.error = f"{type(e).__name__}: {e}"
    out.end = time.perf_counter()
    if out.error is None and not done:
        out.error = "stream ended without [DONE]"
    return out


async def run_method(
    url: str, method: str, prompts: list[tuple[str, list[int]]], clients: int, requests: int, max_tokens: int,
    deadline: float,
) -> tuple[list[list[Outcome]], float]:  # fmt: skip
    """Every client's outcomes (in order) and the wall time of the phase."""
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)

    async def client(c: int, http: httpx.AsyncClient) -> list[Outcome]:
        outs = []
        for r in range(requests):
            i = c * requests + r
            left = deadline - time.monotonic()
            if left <= 0:
                outs.append(Outcome(i, time.perf_counter(), error="wall-clock limit reached before sending"))
                continue
            outs.append(await one_request(http, url, method, prompts[i][0], i, max_tokens, left))
        return outs

    start = time.perf_counter()
    async with httpx.AsyncClient(timeout=None, limits=limits) as http:
        per_client = await asyncio.gather(*(client(c, http) for c in range(clients)))
    return list(per_client), time.perf_counter() - start


def summarize(per_client: list[list[Outcome]], wall: float, reference: list[list[int]]) -> dict[str, Any]:
    flat = [o for outs in per_client for o in outs]
    ok = [o for o in flat if o.error is None]
    ttfts = [o.first - o.start for o in ok if o.first is not None]
    client_rates = []
    for outs in per_client:
        good = [o for o in outs if o.error is None and o.end is not None]
        busy = sum(o.end - o.start for o in good)  # type: ignore[operator]
        if busy > 0:
            client_rates.append(sum(o.tokens for o in good) / busy)
    identical = sum(o.token_ids == reference[o.prompt] for o in ok)
    return {
        "requests": len(flat),
        "errors": len(flat) - len(ok),
        "error_samples": sorted({o.error for o in flat if o.error})[:5],
        "tokens": sum(o.tokens for o in ok),
        "wall_s": round(wall, 3),
        "ttft_p50_s": round(percentile(ttfts, 50), 4),
        "ttft_p95_s": round(percentile(ttfts, 95), 4),
        "per_client_tok_s": round(statistics.fmean(client_rates), 3) if client_rates else 0.0,
        "aggregate_tok_s": round(sum(o.tokens for o in ok) / wall, 3) if wall > 0 else 0.0,
        "identical_to_offline": bool(ok) and identical == len(flat),
        "identical_requests": identical,
    }


def spec_metrics(text: str) -> dict[str, dict[str, float]]:
    """The per-method counters of a /metrics scrape: {method: {series: value}} (spec-decode and tokens)."""
    out: dict[str, dict[str, float]] = {}
    for line in text.splitlines():
        if line.startswith("#") or 'method="' not in line or "_bucket" in line or "per_pos" in line:
            continue
        if not any(k in line for k in ("spec_decode", "generation_tokens_total", "prompt_tokens_total")):
            continue
        series, value = line.rsplit(" ", 1)
        method = series.split('method="', 1)[1].split('"', 1)[0]
        out.setdefault(method, {})[series.split("{", 1)[0]] = float(value)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument(
        "--dtype", default="float32", help="float32 keeps greedy outputs comparable token for token"
    )
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--methods", default="ar,pld,lookahead")
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--requests", type=int, default=2, help="requests per client, sent one after another")
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--time-limit", type=float, default=900.0, help="wall-clock seconds for the whole run")
    p.add_argument("--out", default="results/serve.json")
    args = p.parse_args(argv)
    if min(args.clients, args.requests, args.max_tokens) < 1 or args.time_limit <= 0:
        p.error("--clients, --requests, --max-tokens and --time-limit must be positive")
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    deadline = time.monotonic() + args.time_limit
    load_before = os.getloadavg()  # other processes on the machine slow every figure: recorded, not hidden
    lm = in_own_thread(load_model, args.model, args.dtype, "cpu", args.threads)
    prompts = prompts_for(lm, args.clients * args.requests)

    print(f"offline greedy AR reference for {len(prompts)} prompts...", file=sys.stderr, flush=True)
    config = GenerationConfig(args.max_tokens, lm.eos_token_ids)

    def offline() -> tuple[list[list[int]], float]:
        ar = build_decoder("ar", lm)
        ar.generate(prompts[0][1], GenerationConfig(2, lm.eos_token_ids))  # warm-up, not timed
        t0 = time.perf_counter()
        return [ar.generate(ids, config).tokens for _, ids in prompts], time.perf_counter() - t0

    # in threads that end, as `fastforward serve` loads: a live OpenMP pool in this thread beside the server's
    # worker would throttle the worker's parallel regions (serve.engine.in_own_thread)
    reference, offline_s = in_own_thread(offline)
    offline_tokens = sum(len(r) for r in reference)

    engine = Engine(lm, method=methods[0], methods=methods, max_queue=max(64, args.clients * 2))
    results: dict[str, Any] = {}
    with BackgroundServer(create_app(engine, lm.tokenizer, lm.name)) as server:
        for method in methods:
            print(
                f"{method}: {args.clients} clients x {args.requests} requests...", file=sys.stderr, flush=True
            )
            per_client, wall = asyncio.run(
                run_method(
                    server.url, method, prompts, args.clients, args.requests, args.max_tokens, deadline
                )
            )
            results[method] = summarize(per_client, wall, reference)
            print(f"  {json.dumps(results[method])}", file=sys.stderr, flush=True)
        metrics = spec_metrics(httpx.get(server.url + "/metrics", timeout=30).text)
    for method, counters in metrics.items():
        forwards = counters.get("fastforward:spec_decode_num_target_forwards_total", 0.0)
        tokens = counters.get("fastforward:spec_decode_generation_tokens_total", 0.0)
        if method in results and forwards:
            results[method]["tokens_per_forward"] = round(tokens / forwards, 4)

    report = {
        "clients": args.clients,
        "requests": sum(r["requests"] for r in results.values()),
        "errors": sum(r["errors"] for r in results.values()),
        "methods": results,
        "config": {
            "model": lm.name,
            "dtype": args.dtype,
            "requests_per_client": args.requests,
            "max_tokens": args.max_tokens,
            "prompts": "MT-bench first turns (then GSM8K held-out), chat template, greedy, EOS honoured",
            "server": "one in-process model worker, 127.0.0.1, ephemeral port",
        },
        "offline_ar": {"tokens": offline_tokens, "tok_s": round(offline_tokens / offline_s, 3)},
        "metrics_after_run": metrics,
        "hardware": hardware.describe(),
        "load_average_1m": {"start": round(load_before[0], 2), "end": round(os.getloadavg()[0], 2)},
        "definitions": {
            "ttft": "request sent -> first streamed content chunk (queue wait included)",
            "per_client_tok_s": "mean over clients of tokens received / seconds spent in its requests",
            "aggregate_tok_s": "all tokens of the method / wall time of its phase",
            "identical_to_offline": "every reply's token ids equal offline greedy AR (fp32) for its prompt",
        },
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}: {report['requests']} requests, {report['errors']} errors", file=sys.stderr)
    return 0 if report["errors"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

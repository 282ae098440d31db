"""``fastforward serve --model M [--method pld] [--port 8000]``: the OpenAI-compatible server (docs/serving.md).

torch, FastAPI and uvicorn are imported only when the command runs: checking the arguments stays fast and
the rest of the CLI works without the serving dependencies.

``--opt`` works as in ``bench``: an unscoped ``key=value`` is a default for every served method that reads
``key``, ``method.key=value`` for that method only; a request's own ``opt`` overrides both."""

from __future__ import annotations

import argparse
import os
import sys

from fastforward.cli.common import add_generation_args, add_model_args, load_models
from fastforward.decoders.registry import METHODS, parse_options
from fastforward.errors import FastForwardError

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve", help="serve an OpenAI-compatible API (chat, completions, streaming, /metrics)"
    )
    add_model_args(p)
    add_generation_args(p)  # --max-new-tokens, --temperature, ... are the defaults of requests that omit them
    p.add_argument("--method", default="ar", choices=list(METHODS), help="default method of requests")
    p.add_argument(
        "--methods",
        default="all",
        help="methods a request may pick with the 'fastforward' extension field: a comma list, or all "
        "(every method of this install; one that cannot run with the loaded models answers 400)",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    p.add_argument("--port", type=int, default=8000, help="port (0: an ephemeral port, printed at start)")
    p.add_argument(
        "--api-key",
        default=os.environ.get("FASTFORWARD_API_KEY"),
        help="require 'Authorization: Bearer KEY' on every endpoint but /health; several keys separated by "
        "commas (one per user: each key's requests only learn from its own earlier outputs, see "
        "--share-history) (default: $FASTFORWARD_API_KEY)",
    )
    p.add_argument(
        "--share-history",
        action="store_true",
        help="let requests of every API key learn from each other's earlier outputs (suffix's global trie); "
        "default: each key keeps its own",
    )
    p.add_argument("--max-queue", type=int, default=64, help="requests that may wait; more get 429")
    p.add_argument(
        "--max-batch-size",
        type=int,
        default=1,
        help="requests of one method (and options) decoded together, joining as others finish "
        "(continuous batching; 1: one request at a time)",
    )
    p.add_argument(
        "--token-budget",
        type=int,
        default=0,
        help="with --max-batch-size > 1: KV positions a batch's rows may reserve, prompt + max_tokens each "
        "(0: no budget)",
    )
    p.add_argument(
        "--shutdown-timeout",
        type=float,
        default=30.0,
        help="on SIGTERM/SIGINT, seconds in-flight requests may take to finish before they are cancelled",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from fastforward.core.decoder import SamplingConfig

    try:
        from fastforward.serve.app import Defaults, bind, create_app, serve_forever
        from fastforward.serve.engine import Engine, in_own_thread
    except ModuleNotFoundError as e:
        raise FastForwardError(
            f"serving needs {e.name}: pip install fastapi uvicorn prometheus-client"
        ) from None
    if not 0 <= args.port <= 65535:
        raise FastForwardError(f"--port must be in [0, 65535], got {args.port}")
    if args.max_queue < 1:
        raise FastForwardError(f"--max-queue must be >= 1, got {args.max_queue}")
    if args.max_batch_size < 1:
        raise FastForwardError(f"--max-batch-size must be >= 1, got {args.max_batch_size}")
    if args.token_budget < 0:
        raise FastForwardError(f"--token-budget must be >= 0 (0: no budget), got {args.token_budget}")
    if args.shutdown_timeout < 0:
        raise FastForwardError(f"--shutdown-timeout must be >= 0, got {args.shutdown_timeout}")
    sampling = SamplingConfig(args.temperature, args.top_k, args.top_p, args.seed)
    sampling.validate()
    if args.max_new_tokens < 1:
        raise FastForwardError(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}")
    methods = (
        None if args.methods.strip() == "all" else [m.strip() for m in args.methods.split(",") if m.strip()]
    )
    for name in methods or []:
        if name not in METHODS:
            raise FastForwardError(f"--methods: unknown method '{name}'; known: {', '.join(METHODS)}")
    if methods is not None and args.method not in methods:
        methods.append(args.method)
    sock = bind(args.host, args.port)  # before loading: a busy port fails in a second, not after the load
    target, draft = in_own_thread(load_models, args)
    engine = Engine(
        target,
        draft,
        args.method,
        parse_options(args.opt),
        methods,
        args.max_queue,
        max_batch_size=args.max_batch_size,
        token_budget=args.token_budget,
    )
    # the stored compiled packages load (in the worker) before huge_pages moves memory onto 2 MB pages
    engine.start(warm=True)
    app = create_app(
        engine,
        target.tokenizer,
        target.name,
        args.api_key,
        Defaults(args.max_new_tokens, sampling),
        share_history=args.share_history,
    )
    host, port = sock.getsockname()[:2]
    batch = f", batches of up to {args.max_batch_size}" if args.max_batch_size > 1 else ""
    print(
        f"fastforward serve: {target.name} ({args.method}{batch}) on http://{host}:{port}",
        file=sys.stderr,
        flush=True,
    )
    if args.host not in LOOPBACK and not args.api_key:
        print("fastforward serve: warning: listening beyond loopback without --api-key", file=sys.stderr)
    serve_forever(app, sock, args.shutdown_timeout)
    return 0

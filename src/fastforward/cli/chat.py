"""``fastforward chat --model M --method pld [--system "..."]``: a terminal chat with one model.

The conversation is kept and re-rendered through the chat template each turn; replies stream through the
same incremental detokenizer as the server (whole characters only). After each reply one line on stderr
says how fast it was and how many tokens each target forward produced. ``/reset`` clears the history,
``/quit`` (or end of input) leaves; Ctrl-C stops a reply without leaving the chat."""

from __future__ import annotations

import argparse
import sys
import time

from fastforward.cli.common import (
    add_generation_args,
    add_model_args,
    forward_width,
    generation_config,
    load_models,
)
from fastforward.core.compiled import compiled
from fastforward.core.detok import TextStream
from fastforward.core.engine import warm_stored
from fastforward.core.memory import frozen_heap, huge_pages
from fastforward.data import render_prompt
from fastforward.decoders.registry import METHODS, build_decoder, models_run, parse_options
from fastforward.errors import FastForwardError
from fastforward.log import log

HELP = "commands: /reset clears the history, /quit leaves"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "chat", help="chat with a model in the terminal, streaming, with a speed line per turn"
    )
    add_model_args(p)
    add_generation_args(p)
    p.add_argument("--method", default="ar", choices=list(METHODS))
    p.add_argument("--system", default=None, help="system prompt")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    target, draft = load_models(args)
    decoder = build_decoder(args.method, target, draft, parse_options(args.opt))
    config = generation_config(args, target)
    config.validate()
    settle(models_run(decoder, target, draft), forward_width(args))
    with frozen_heap():  # what loaded is no longer re-scanned by full collections mid-reply
        return _chat(args, target, decoder, config)


def settle(models: list, width: int = 0) -> None:
    """Before the first turn, as a server's start-up does: with compiled forwards, load the stored packages
    of the models the method runs (``models``, the target first; building none; a bucket without one
    compiles on first use): the drafts' 1-token ones, and the target's 1-token one where ``width`` is 1 (an
    AR-like method, :func:`~fastforward.cli.common.forward_width`), all of its otherwise; then move the
    process's memory onto 2 MB pages (:func:`fastforward.core.memory.huge_pages`), said in one line.

    Why: a package that first loads inside a reply delays it by its load, and what loads after the move
    keeps the kernel's 4 KB pages; on 2 MB pages a SmolLM2 bf16 AR step ran 6.5-9.2% faster on a 2-core
    EPYC (session 48). Without compiled forwards nothing is done: the move costs seconds of start-up
    (2.6-2.9 GB with every bucket loaded: 6-7 s on that EPYC), which an eager chat would not win back."""
    if all(compiled(m) is None for m in models):
        return
    start = time.perf_counter()
    # a draft steps through its 1-token graph alone (ModelEngine.feed)
    loaded = sum(warm_stored(m, (1,) if width == 1 or i else None) for i, m in enumerate(models))
    huge = huge_pages()
    log(
        f"chat: stored compiled packages loaded ({loaded:.1f} s), {huge / 1e9:.2f} GB on 2 MB pages "
        f"({time.perf_counter() - start:.1f} s in all)"
    )


def _chat(args: argparse.Namespace, target, decoder, config) -> int:
    """The conversation loop: one line in, one streamed reply out, until /quit or the end of input."""
    tok = target.tokenizer
    start = [{"role": "system", "content": args.system}] if args.system else []
    history = list(start)
    interactive = sys.stdin.isatty()
    print(f"fastforward chat: {target.name}, method {args.method}; {HELP}", file=sys.stderr)
    while True:
        if interactive:
            sys.stdout.write("> ")
            sys.stdout.flush()
        line = sys.stdin.readline()
        if not line:  # end of input
            break
        line = line.strip()
        if line == "/quit":
            break
        if line == "/reset":
            history = list(start)
            print("(history cleared)", file=sys.stderr)
            continue
        if not line:
            continue
        if line.startswith("/"):
            print(f"unknown command {line}; {HELP}", file=sys.stderr)
            continue
        history.append({"role": "user", "content": line})
        reply = _turn(decoder, tok, history, config, args.method)
        if reply is None:
            history.pop()  # the turn failed: forget the question, keep the conversation usable
        else:
            history.append({"role": "assistant", "content": reply})
    return 0


def _turn(decoder, tok, history: list[dict[str, str]], config, method: str) -> str | None:
    """Generate and stream one reply; None when it could not be generated (context full, interrupted)."""
    text = TextStream(tok)

    def stream(new: list[int]) -> None:
        sys.stdout.write(text.push(new))
        sys.stdout.flush()

    try:
        result = decoder.generate(render_prompt(tok, history), config, on_tokens=stream)
    except FastForwardError as e:
        print(f"fastforward: {e} (/reset clears the history)", file=sys.stderr)
        return None
    except KeyboardInterrupt:
        print("\n(interrupted)", file=sys.stderr)
        return None
    print(text.finish())
    s = result.stats
    print(
        f"[{method}] {s.new_tokens} tokens in {s.wall_time_s:.2f}s, {s.tokens_per_s:.1f} tok/s, "
        f"{s.mean_accepted_tokens:.2f} tokens/forward",
        file=sys.stderr,
        flush=True,
    )
    return text.text

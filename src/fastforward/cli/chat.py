"""``fastforward chat --model M --method pld [--system "..."]``: a terminal chat with one model.

The conversation is kept and re-rendered through the chat template each turn; replies stream through the
same incremental detokenizer as the server (whole characters only). After each reply one line on stderr
says how fast it was and how many tokens each target forward produced. ``/reset`` clears the history,
``/quit`` (or end of input) leaves; Ctrl-C stops a reply without leaving the chat."""

from __future__ import annotations

import argparse
import sys

from fastforward.cli.common import add_generation_args, add_model_args, generation_config, load_models
from fastforward.core.detok import TextStream
from fastforward.data import render_prompt
from fastforward.decoders.registry import METHODS, build_decoder, parse_options
from fastforward.errors import FastForwardError

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

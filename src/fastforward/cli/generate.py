"""``fastforward generate --model M --method NAME "prompt"``: stream an answer, then print the stats line."""

from __future__ import annotations

import argparse
import sys

from fastforward.cli.common import add_generation_args, add_model_args, generation_config, load_models
from fastforward.data import render_prompt
from fastforward.decoders.registry import METHODS, build_decoder, parse_options


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("generate", help="generate an answer with one method, streaming")
    add_model_args(p)
    add_generation_args(p)
    p.add_argument("--method", default="ar", choices=list(METHODS))
    p.add_argument("--raw", action="store_true", help="do not apply the chat template")
    p.add_argument("prompt")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    target, draft = load_models(args)
    decoder = build_decoder(args.method, target, draft, parse_options(args.opt))
    tok = target.tokenizer
    ids = (
        list(tok(args.prompt)["input_ids"])
        if args.raw
        else render_prompt(tok, [{"role": "user", "content": args.prompt}])
    )
    done: list[int] = []
    printed = ""

    def stream(new: list[int]) -> None:
        nonlocal printed
        done.extend(new)
        text = tok.decode(done, skip_special_tokens=True)
        sys.stdout.write(text[len(printed) :])
        sys.stdout.flush()
        printed = text

    result = decoder.generate(ids, generation_config(args, target), on_tokens=stream)
    print()
    print(result.stats.summary(), file=sys.stderr)
    return 0

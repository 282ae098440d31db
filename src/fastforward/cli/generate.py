"""``fastforward generate --model M --method NAME "prompt"``: stream an answer, then print the stats line."""

from __future__ import annotations

import argparse
import sys

from fastforward.cli.common import (
    add_constraint_args,
    add_generation_args,
    add_model_args,
    generation_config,
    load_models,
)
from fastforward.core.detok import TextStream
from fastforward.data import render_prompt
from fastforward.decoders.registry import METHODS, build_decoder, parse_options
from fastforward.errors import FastForwardError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("generate", help="generate an answer with one method, streaming")
    add_model_args(p)
    add_generation_args(p)
    add_constraint_args(p)
    p.add_argument(
        "--method", default="ar", choices=list(METHODS), help="decoding method (see fastforward methods)"
    )
    p.add_argument("--raw", action="store_true", help="do not apply the chat template")
    p.add_argument("prompt", help="the prompt, or - to read it from standard input")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    target, draft = load_models(args)
    decoder = build_decoder(args.method, target, draft, parse_options(args.opt))
    tok = target.tokenizer
    prompt = sys.stdin.read().rstrip("\n") if args.prompt == "-" else args.prompt  # `echo ... |` adds "\n"
    if not prompt:
        raise FastForwardError("the prompt is empty")
    ids = (
        list(tok(prompt)["input_ids"])
        if args.raw
        else render_prompt(tok, [{"role": "user", "content": prompt}])
    )
    text = TextStream(tok)  # whole characters only: a multi-byte character may span tokens

    def stream(new: list[int]) -> None:
        sys.stdout.write(text.push(new))
        sys.stdout.flush()

    result = decoder.generate(ids, generation_config(args, target), on_tokens=stream)
    print(text.finish())
    print(result.stats.summary(), file=sys.stderr)
    return 0

"""``fastforward trace --model M --method jacobi --out FILE.png|FILE.html "prompt"``: decode with Jacobi,
recording every iterate, and draw the trajectory (CLLM Figure 2) in the terminal and to a file."""

from __future__ import annotations

import argparse
import re
import sys

from fastforward.cli.common import add_model_args, generation_config, load_models
from fastforward.data import render_prompt
from fastforward.decoders.registry import build_decoder, parse_options
from fastforward.errors import FastForwardError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("trace", help="draw the Jacobi trajectory of one prompt (terminal, PNG or HTML)")
    add_model_args(p, draft=False, path_default="default")
    p.add_argument("--method", default="jacobi", choices=["jacobi"], help="the method traced (Jacobi only)")
    p.add_argument("--max-new-tokens", type=int, default=48, help="most new tokens")
    p.add_argument("--opt", action="append", default=[], metavar="KEY=VALUE", help="e.g. block_size=16")
    p.add_argument("--out", default=None, help="write FILE.png or FILE.html")
    p.add_argument("--raw", action="store_true", help="do not apply the chat template")
    p.add_argument("--no-color", action="store_true", help="plain terminal output")
    p.add_argument("prompt", help="the prompt to decode")
    p.set_defaults(func=run, temperature=0.0, top_k=0, top_p=1.0, seed=None)


def run(args: argparse.Namespace) -> int:
    if args.out and not args.out.lower().endswith((".png", ".html", ".htm")):
        raise FastForwardError(f"--out must end in .png or .html, got '{args.out}'")
    options = parse_options(args.opt)
    if options.get("record") is False:
        raise FastForwardError("trace needs the trajectory: drop record=false")
    options["record"] = True
    from fastforward import trace  # here: it imports torch, which checking the arguments does not need

    target, _ = load_models(args)
    decoder = build_decoder(args.method, target, None, options)
    tok = target.tokenizer
    ids = (
        list(tok(args.prompt)["input_ids"])
        if args.raw
        else render_prompt(tok, [{"role": "user", "content": args.prompt}])
    )
    result = decoder.generate(ids, generation_config(args, target))
    rows = trace.trajectory_rows(decoder.last_trajectory, tok.decode)
    text = trace.render_ansi(rows)
    if args.no_color:
        text = re.sub(r"\033\[[0-9;]*m", "", text)
    print(text)
    ex = result.stats.extras
    title = (
        f"Jacobi trajectory: {target.name} {target.dtype}, n={decoder.config.block_size}, "
        f"{ex['blocks']} blocks, {ex['fast_forward_tokens'] / max(ex['fixed_point_iterations'], 1):.2f} "
        f"fast-forwarded tokens/iteration, {ex['stationary_tokens']} stationary"
    )
    print(title, file=sys.stderr)
    print(result.stats.summary(), file=sys.stderr)
    if args.out:
        print(f"wrote {trace.write(rows, title, args.out)}", file=sys.stderr)
    return 0

"""Flags shared by subcommands that load models or generate."""

from __future__ import annotations

import argparse

from fastforward.core.decoder import GenerationConfig, SamplingConfig
from fastforward.models.kernels import PATHS
from fastforward.models.loading import DTYPES, LoadedModel, load_model
from fastforward.models.registry import DEFAULT_MODEL


def add_model_args(p: argparse.ArgumentParser, draft: bool = True, path: bool = True) -> None:
    p.add_argument("--model", default=DEFAULT_MODEL, help="registry name, HF model directory, or .gguf file")
    if draft:
        p.add_argument("--draft", default=None, help="draft model (same tokenizer) for speculative methods")
    p.add_argument("--dtype", default="float32", choices=list(DTYPES))
    if path:  # training needs plain parameters, so it offers no kernel path
        p.add_argument(
            "--path",
            default="default",
            choices=list(PATHS),
            help="kernel path of the linear layers: default, or prepacked (oneDNN weights reordered once; "
            "cheap multi-token forwards on CPUs where the default GEMM is not; see `fastforward costs`)",
        )
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: all cores)")


def add_generation_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument(
        "--opt",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="method option, repeatable (e.g. block_size=16, gamma=5, eps=2.0); LABEL.key=value applies to one --methods entry only",
    )


def load_models(args: argparse.Namespace) -> tuple[LoadedModel, LoadedModel | None]:
    target = load_model(args.model, args.dtype, args.device, args.threads, args.path)
    draft = (
        load_model(args.draft, args.dtype, args.device, path=args.path)
        if getattr(args, "draft", None)
        else None
    )
    return target, draft


def generation_config(args: argparse.Namespace, target: LoadedModel) -> GenerationConfig:
    return GenerationConfig(
        max_new_tokens=args.max_new_tokens,
        eos_token_ids=target.eos_token_ids,
        sampling=SamplingConfig(args.temperature, args.top_k, args.top_p, args.seed),
    )

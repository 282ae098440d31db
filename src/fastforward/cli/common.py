"""Flags shared by subcommands that load models or generate, and the one place they load them.

Nothing heavy is imported at module level: a command's flags are checked (:mod:`fastforward.cli.validate`)
before torch and transformers are imported, so a mistyped flag costs a fraction of a second.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from fastforward.cli.validate import DTYPE_NAMES, constraint_request, kernel_path
from fastforward.errors import FastForwardError
from fastforward.log import log
from fastforward.models.registry import DEFAULT_MODEL

if TYPE_CHECKING:
    from fastforward.core.decoder import GenerationConfig
    from fastforward.models.loading import LoadedModel


def add_model_args(
    p: argparse.ArgumentParser,
    draft: bool = True,
    path: bool = True,
    dtype: str = "auto",
    path_default: str = "auto",
) -> None:
    """``--model``, ``--draft``, ``--dtype`` (default ``auto`` unless a command needs one: training does),
    ``--path`` (default ``auto``: the measured-fastest kernel path, from curves cached per machine, so a new
    user gets the fast path without knowing the flag), ``--device`` and ``--threads``."""
    p.add_argument("--model", default=DEFAULT_MODEL, help="registry name, HF model directory, or .gguf file")
    if draft:
        p.add_argument(
            "--draft",
            default=None,
            help="draft model (same tokenizer) for the methods that take one: sd, sd-sample, typical, "
            "consultant, hf_assisted (an error with any other method)",
        )
    p.add_argument(
        "--dtype",
        default=dtype,
        choices=["auto", *DTYPE_NAMES],
        help="weights and activations dtype; auto = bfloat16 on CPUs with native bf16 (AVX512_BF16/AMX) "
        "and on CUDA, float32 on other CPUs (the choice and why are printed)",
    )
    if path:  # training needs plain parameters, so it offers no kernel path
        p.add_argument(
            "--path",
            default=path_default,
            type=kernel_path,
            help=f"kernel path of the linear layers (default {path_default}): auto = the cheapest measured "
            "(dtype, path) for the run's methods, with --dtype auto choosing the dtype too (curves measured "
            "once per machine and model, ~10 s for a small model, then cached; the choice is printed); "
            "default = torch's dispatch; prepacked = oneDNN weights reordered once (cheap multi-token forwards "
            "on CPUs where the default GEMM is not; see `fastforward costs`)",
        )
        p.add_argument(
            "--compile",
            default="off",
            choices=["off", "on", "auto"],
            help="on = run the target's decoding forwards as torch.compile graphs per width bucket 1-32 over a "
            "fixed KV cache sized to the request: on CPU inductor with frozen weights and max-autotune (~1.5-2.5x "
            "faster per token on small models; each bucket compiles on first use, ~1.5-3 min on 2 cores, into "
            "an AOTInductor package in the cache directory that later runs load in ~1 s), on CUDA one CUDA "
            "graph per bucket; auto = on where compiling repays itself: on a GPU, "
            "and for a CPU server (`serve`), off for one-shot CPU commands (the choice is printed); responses "
            "say whether a request ran compiled or eager and why",
        )
        p.add_argument(
            "--buckets",
            default=None,
            type=bucket_widths,
            metavar="auto|W,W,...",
            help="with --compile on: the width buckets that get compiled graphs, from 1,2,4,8,16,32; a "
            "forward pads up to the next one and runs eagerly past the widest [default: auto = all, or on a "
            "CPU where each package holds its own copy of the weights (bf16, int8/int4, and float32 where the "
            "CPU's last-level cache holds less than half of them), as many as fit in free memory, 1 and 8 "
            "first; the choice is printed]",
        )
        p.add_argument(
            "--weights",
            default="full",
            choices=["full", "int8", "int4", "w8a8"],
            help="target weights: full = as loaded in --dtype; int8 (per channel) or int4 (per group of 32-256 "
            "inputs) = every linear layer, LM head included, through torch's weight-only CPU kernels: a smaller "
            "model. Those kernels take bf16 activations, so methods agree with its greedy AR as in a bf16 run "
            "(near-ties flip), not token for token; w8a8 = the int8 weights times each token's activations "
            "rounded to int8 (torch's int8 GEMM, like llama.cpp Q8_0), the fast int8 path on a CPU without bf16; "
            "methods match its greedy AR token for token in float32, eager or compiled; CPU only, needs VNNI, "
            "kernel path default",
        )
        p.add_argument(
            "--fp32-logits",
            action="store_true",
            help="compute the LM head in float32 on a bf16/fp16 model: near-tied top-1/top-2 logits keep "
            "their order, so multi-token methods agree with AR more often (costs a float32 copy of the head)",
        )
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch CPU threads (default: timing commands use the cores other processes leave free, "
        "others all cores)",
    )


def add_generation_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-new-tokens", type=int, default=128, help="most new tokens per answer")
    p.add_argument("--temperature", type=float, default=0.0, help="sampling temperature; 0 = greedy")
    p.add_argument("--top-k", type=int, default=0, help="sample from the k most likely tokens (0 = off)")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass in (0, 1] (1 = off)")
    p.add_argument("--seed", type=int, default=None, help="sampling seed (default: unseeded)")
    p.add_argument(
        "--opt",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="method option, repeatable (e.g. block_size=16, gamma=5); unscoped it goes to the methods that "
        "have it, LABEL.key=value to one --methods entry; `fastforward methods` lists every option",
    )


def add_constraint_args(p: argparse.ArgumentParser) -> None:
    """Structured output: what every answer must match (one of these)."""
    g = p.add_mutually_exclusive_group()
    g.add_argument("--json-schema", metavar="FILE", help="answers are JSON valid under this JSON Schema file")
    g.add_argument("--json-object", action="store_true", help="answers are a JSON object")
    g.add_argument("--regex", metavar="PATTERN", help="answers match this regular expression (whole answer)")
    g.add_argument(
        "--choice",
        action="append",
        metavar="TEXT",
        help="an answer is exactly one of these (repeat the flag)",
    )


def resolve_dtype(args: argparse.Namespace) -> str:
    """``args.dtype`` with ``auto`` resolved for this machine and ``args.device``, printed once (with why)."""
    from fastforward.hardware import resolve_dtype as choose

    dtype, why = choose(args.dtype, getattr(args, "device", "cpu"))
    if why is not None:
        log(f"--dtype auto: {dtype} ({why})")
        args.dtype = dtype
    return dtype


AR_LIKE = ("ar", "ar_eager", "hf_generate")


def forward_width(args: argparse.Namespace) -> int:
    """Tokens per target forward the run's methods need cheap: 1 when every method is AR-like, else the
    verify block (what ``--path auto`` chooses the configuration for)."""
    from fastforward.bench.costs import VERIFY_K

    text = getattr(args, "methods", None) or getattr(args, "method", None) or "ar"
    names = [n.split(":")[0].strip() for n in str(text).split(",") if n.strip()]
    return 1 if names and all(n in AR_LIKE for n in names) else VERIFY_K


def resolve_path(args: argparse.Namespace) -> None:
    """``--path auto``: set ``args.dtype`` and ``args.path`` to the measured cheapest configuration for this
    run (:func:`fastforward.bench.costs.auto_config`), printed once with why."""
    if getattr(args, "path", None) != "auto":
        return
    if getattr(args, "weights", "full") != "full":  # the quantized kernels replace every kernel path
        args.path = "default"
        log(f"--path auto: default (--weights {args.weights} runs torch's {args.weights} kernels)")
        return
    if compile_choice(args) == "on" and getattr(args, "device", "cpu") == "cpu":
        # inductor lays the frozen weights out for its own GEMM kernels; oneDNN-prepacked linears would only
        # stand in their way (SmolLM2 fp32 compiled AR, AVX-512: 54.9 tok/s from the default path, 46.2
        # from prepacked)
        args.path = "default"
        if args.dtype == "auto":  # the compiled engine is measured, and exact, in fp32; bf16 is not measured
            args.dtype = "float32"
        log(
            f"--path auto: {args.dtype}/default (--compile on: the compiled graphs lay out the weights themselves)"
        )
        return
    from fastforward.bench.costs import auto_config

    pick = auto_config(args.model, args.dtype, "auto", forward_width(args), getattr(args, "device", "cpu"))
    log(f"--path auto: {pick.dtype}/{pick.path} ({pick.why})")
    args.dtype, args.path = pick.dtype, pick.path


def load_models(args: argparse.Namespace) -> tuple[LoadedModel, LoadedModel | None]:
    from fastforward.models.loading import load_model

    resolve_path(args)
    dtype = resolve_dtype(args)
    logits32 = getattr(args, "fp32_logits", False)
    weights = getattr(args, "weights", "full")
    target = load_model(args.model, dtype, args.device, args.threads, args.path, logits32, weights)
    draft = (
        load_model(args.draft, dtype, args.device, path=args.path) if getattr(args, "draft", None) else None
    )
    if compile_choice(args) == "on":
        compile_target(target, getattr(args, "max_new_tokens", 128), getattr(args, "buckets", None))
    return target, draft


def compile_pays(device: str, command: str) -> tuple[bool, str]:
    """``--compile auto``: whether compiling repays its start-up here, and why. A GPU: yes (CUDA graphs
    remove the kernel-launch cost that bounds a small model's step: SmolLM2 bf16 on one H100, 428 tok/s
    against 37 eager). A CPU: only for a server, which decodes long enough to repay ~1.5-3 min per bucket
    (SmolLM2 fp32 on a 2-core AVX2 CPU: ~23 ms per token compiled against ~55 eager, so a bucket pays back
    after roughly 3,000-6,000 tokens); a one-shot command would spend longer compiling than decoding."""
    if device.startswith("cuda"):
        return True, "a GPU: one CUDA graph per width bucket"
    if command == "serve":
        return True, "a CPU server decodes long enough to repay compiling each bucket once"
    return False, f"`{command}` on a CPU would spend longer compiling than decoding; --compile on forces it"


def bucket_widths(text: str) -> tuple[int, ...] | None:
    """``--buckets`` parsed (argparse reports a bad one in one line, exit 2)."""
    from fastforward.core.compiled import parse_buckets

    try:
        return parse_buckets(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def compile_choice(args: argparse.Namespace) -> str:
    """``args.compile`` with ``auto`` resolved (printed once with why): ``on`` or ``off``."""
    choice = getattr(args, "compile", "off")
    if choice != "auto":
        return choice
    pays, why = compile_pays(getattr(args, "device", "cpu"), getattr(args, "command", "") or "")
    args.compile = "on" if pays else "off"
    log(f"--compile auto: {args.compile} ({why})")
    return args.compile


def compile_target(target: LoadedModel, max_new_tokens: int, widths: tuple[int, ...] | None = None) -> None:
    """``--compile on``: give the target compiled forwards with a fixed cache that holds a long prompt
    (512 tokens), the answer and the widest bucket; a request that needs more runs eagerly and says so.
    ``widths``: ``--buckets`` (None: auto, :class:`fastforward.core.compiled.CompiledForward`)."""
    from fastforward.core.compiled import BUCKETS, inductor_cache
    from fastforward.core.engine import compile_forward
    from fastforward.core.memory import store_limit
    from fastforward.models.cache import cache_root, compiled_dir

    inductor_cache(str(cache_root()))
    capacity = 1 << (512 + max_new_tokens + BUCKETS[-1] - 1).bit_length()
    cuda = next(target.model.parameters()).is_cuda  # GPU: CUDA graphs (cuBLAS needs no GEMM autotuning)
    if cuda:
        compile_forward(target.model, capacity, mode="reduce-overhead", widths=widths)
        log(f"--compile on: one CUDA graph per width bucket on first use (fixed cache of {capacity} slots)")
        return
    store = compiled_dir()
    try:
        store_limit()  # a bad FASTFORWARD_COMPILED_GB is the user's error, said before anything compiles
    except ValueError as e:
        raise FastForwardError(str(e)) from None
    compile_forward(target.model, capacity, mode="max-autotune", store=store, widths=widths)
    log(
        f"--compile on: decoding forwards compiled per width bucket on first use (fixed cache of {capacity} "
        f"slots), kept in {store} so later runs load them in seconds"
    )


def generation_config(args: argparse.Namespace, target: LoadedModel) -> GenerationConfig:
    from fastforward.core.decoder import GenerationConfig, SamplingConfig

    ask = constraint_request(args)  # checked already, before the model loaded (cli.validate)
    return GenerationConfig(
        max_new_tokens=args.max_new_tokens,
        eos_token_ids=target.eos_token_ids,
        sampling=SamplingConfig(args.temperature, args.top_k, args.top_p, args.seed),
        constraint=target.constraint(*ask) if ask is not None else None,
    )

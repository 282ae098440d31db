"""``fastforward train-chimera``: self-distillation data -> train a Chimera draft -> (``--eval``) evaluate it.

Thin wrapper over :mod:`fastforward.chimera` and :mod:`fastforward.bench.chimera_eval`. Data is cached in
``--data`` (default ``OUT/data``) and reused by later runs (ablations share it); ``--resume`` continues from
``OUT/checkpoint``. ``--eval`` reports head top-1..5 accuracy on held-out prompts and decodes a few of them
with the trained draft (greedy, checked token-for-token against AR), writing a JSON report with the resolved
configuration.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

from fastforward.bench.chimera_eval import evaluate_draft
from fastforward.chimera.checkpoint import load_draft
from fastforward.chimera.data import DistillConfig, collect_distill_data
from fastforward.chimera.train import TrainConfig, train
from fastforward.cli.common import add_model_args
from fastforward.distributed import process_state
from fastforward.hardware import training_autocast
from fastforward.log import log
from fastforward.models.loading import load_model


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train-chimera", help="train (and evaluate) a Chimera draft for a target model")
    add_model_args(p, draft=False, path=False, dtype="float32")
    p.add_argument("--out", required=True, help="directory for the draft (draft.safetensors + config)")
    p.add_argument("--data", default=None, help="self-distillation cache (default OUT/data)")
    p.add_argument("--sharegpt", type=int, default=40, help="training prompts from ShareGPT")
    p.add_argument("--gsm8k", type=int, default=40, help="training prompts from the GSM8K train part")
    p.add_argument("--max-new-tokens", type=int, default=128, help="answer length when collecting data")
    p.add_argument("--gen-batch-size", type=int, default=8, help="prompts answered per batch when collecting")
    p.add_argument("--heads", type=int, default=4, help="draft heads (tokens proposed per step)")
    p.add_argument(
        "--variant",
        default="chimera",
        choices=["chimera", "no_residual", "medusa"],
        help="draft architecture",
    )
    p.add_argument("--vocab", default="shared", choices=["shared", "own"], help="how heads reach the vocab")
    p.add_argument("--steps", type=int, default=200, help="optimizer steps")
    p.add_argument("--batch-size", type=int, default=4, help="sequences per step")
    p.add_argument("--max-len", type=int, default=256, help="most tokens per training sequence")
    p.add_argument("--lr", type=float, default=1e-3, help="peak learning rate")
    p.add_argument("--warmup", type=int, default=20, help="learning-rate warm-up steps")
    p.add_argument("--mse-weight", type=float, default=1.0, help="weight of the hidden-state MSE loss")
    p.add_argument(
        "--ce-positions",
        type=int,
        default=0,
        help="per head and step, CE on this many random answer positions (0 = all)",
    )
    p.add_argument(
        "--precision", default="auto", choices=["auto", "bf16", "fp32"],
        help="bf16 autocast or fp32; auto: bf16 where the CPU has native bf16 (or on CUDA), else fp32",
    )  # fmt: skip
    p.add_argument("--no-bf16", action="store_true", help="same as --precision fp32")
    p.add_argument("--seed", type=int, default=0, help="random seed")
    p.add_argument("--save-every", type=int, default=100, help="checkpoint every N steps")
    p.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint")
    p.add_argument("--eval", action="store_true", help="evaluate after training")
    p.add_argument(
        "--collect-only",
        action="store_true",
        help="only write the training data (then train variants in parallel)",
    )
    p.add_argument("--eval-only", action="store_true", help="evaluate an existing draft in OUT; no training")
    p.add_argument("--eval-prompts", type=int, default=16, help="held-out prompts for head accuracy")
    p.add_argument("--eval-decode", type=int, default=4, help="held-out prompts decoded with the draft")
    p.add_argument("--report", default=None, help="write the evaluation JSON here (default OUT/eval.json)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    state = process_state()  # under `accelerate launch`: data collection and training split by rank
    device = str(state.device) if state.num_processes > 1 and args.device.startswith("cuda") else args.device
    target = load_model(args.model, args.dtype, device, args.threads)
    out = Path(args.out)
    data = Path(args.data) if args.data else out / "data"
    dcfg = DistillConfig(
        sharegpt=args.sharegpt,
        gsm8k=args.gsm8k,
        max_new_tokens=args.max_new_tokens,
        gen_batch_size=args.gen_batch_size,
    )
    if not args.eval_only:
        collect_distill_data(target, data / "train", dcfg, state.process_index, state.num_processes)
        state.wait_for_everyone()
        if args.collect_only:
            return 0
        bf16, why = training_autocast("fp32" if args.no_bf16 else args.precision, args.device)
        if why:
            log(why)
        tcfg = TrainConfig(
            data=str(data / "train"), out=str(out), num_heads=args.heads, variant=args.variant,
            vocab=args.vocab, steps=args.steps, batch_size=args.batch_size, max_len=args.max_len,
            lr=args.lr, warmup=args.warmup, mse_weight=args.mse_weight, ce_positions=args.ce_positions,
            bf16=bf16,
            seed=args.seed, save_every=args.save_every,
        )  # fmt: skip
        train(tcfg, target.model, resume=args.resume)
    if (args.eval or args.eval_only) and state.is_main_process:
        draft = load_draft(out, target.model)
        report = evaluate_draft(
            target,
            draft,
            data,
            eval_prompts=args.eval_prompts,
            eval_decode=args.eval_decode,
            max_new_tokens=args.max_new_tokens,
            gen_batch_size=args.gen_batch_size,
        )
        report["data"] = asdict(dcfg)
        path = Path(args.report) if args.report else out / "eval.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(report, indent=1))
        print(json.dumps({k: report[k] for k in ("head_topk", "mean_accepted_tokens", "identical_to_ar")}))
    return 0

"""``fastforward train-cllm``: consistency training (CLLM or Jacobi Forcing) on collected trajectories -> a plain
HF model directory."""

from __future__ import annotations

import argparse
import sys

from fastforward.cllm.augment import CleanConfig
from fastforward.cllm.cllm import TrainConfig, train
from fastforward.hardware import training_autocast
from fastforward.log import log


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train-cllm",
        help="train a CLLM or a Jacobi Forcing model (consistency + AR loss) on Jacobi trajectories",
    )
    p.add_argument("--model", default="smollm2-135m", help="the model the trajectories came from")
    p.add_argument(
        "--data", required=True, help="trajectory file (fastforward JSONL or Consistency_LLM layout)"
    )
    p.add_argument("--out", required=True, help="output model directory")
    p.add_argument(
        "--objective", default="cllm", choices=["cllm", "forcing"],
        help="cllm: noisy states after clean earlier blocks; forcing: Jacobi Forcing, every block's noisy "
        "state after the earlier noisy blocks (noise schedule below), all blocks in one sequence",
    )  # fmt: skip
    p.add_argument(
        "--loss", default="global", choices=["global", "local"],
        help="cllm consistency loss: global (to the fixed point) or local (to the next state)",
    )  # fmt: skip
    p.add_argument(
        "--noise-window", type=int, default=8,
        help="forcing: blocks per clean-to-fully-noisy ramp of the cyclic noise schedule (w)",
    )  # fmt: skip
    p.add_argument(
        "--noise-strategy", default="progressive", choices=["progressive", "reverse", "random"],
        help="forcing: how each block's noise level is picked from the window's levels",
    )  # fmt: skip
    p.add_argument(
        "--distance",
        default="fkl",
        choices=["fkl", "rkl", "js"],
        help="distance of the consistency loss (KL or JS)",
    )
    p.add_argument("--ar-weight", type=float, default=10.0, help="w in L = consistency + w * AR")
    p.add_argument(
        "--ar-target",
        default="teacher",
        choices=["teacher", "labels"],
        help="AR loss target: teacher answers or labels",
    )
    p.add_argument(
        "--label-smoothing", type=float, default=0.1, help="label smoothing of the AR loss, in [0, 1]"
    )
    p.add_argument("--states-per-block", type=int, default=2, help="noisy states packed per block and step")
    p.add_argument("--batch-size", type=int, default=1, help="prompts per optimizer step")
    p.add_argument("--max-steps", type=int, default=100, help="optimizer steps")
    p.add_argument(
        "--max-train-tokens", type=int, default=0,
        help="stop once this many packed tokens were fed (0: no limit); compare runs at equal budgets",
    )  # fmt: skip
    p.add_argument("--lr", type=float, default=1e-4, help="peak learning rate")
    p.add_argument("--warmup-steps", type=int, default=10, help="linear learning-rate warm-up steps")
    p.add_argument("--max-packed-tokens", type=int, default=2048, help="most tokens packed into one sequence")
    p.add_argument("--save-every", type=int, default=0, help="checkpoint every N steps (0: only the end)")
    p.add_argument(
        "--snapshot-every", type=int, default=0,
        help="also save a loadable bf16 model every N steps under OUT/snapshots (for cllm-curve)",
    )  # fmt: skip
    p.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in --out")
    p.add_argument("--seed", type=int, default=0, help="random seed")
    p.add_argument(
        "--mixed-precision", default="auto", choices=["auto", "bf16", "no"],
        help="bf16 autocast, or no; auto: bf16 where the CPU has native bf16 (or on CUDA), else no",
    )  # fmt: skip
    p.add_argument("--augment", type=int, default=1, help="augmented copies per intermediate state (0: off)")
    p.add_argument("--max-run", type=int, default=10, help="drop blocks with a run of this many equal tokens")
    p.add_argument("--ngram", type=int, default=8, help="n of the repeated n-gram rule")
    p.add_argument("--max-ngram-repeats", type=int, default=3, help="0 disables the n-gram rule")
    p.add_argument("--min-sentence-tokens", type=int, default=6, help="0 disables the sentence rule")
    p.add_argument("--lora", action="store_true", help="train LoRA adapters (needs peft), merged at the end")
    p.add_argument("--lora-r", type=int, default=16, help="LoRA rank (with --lora)")
    p.add_argument("--log-every", type=int, default=10, help="print the losses every N steps")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    cfg = TrainConfig(
        model=args.model,
        data=args.data,
        out=args.out,
        objective=args.objective,
        loss=args.loss,
        noise_window=args.noise_window,
        noise_strategy=args.noise_strategy,
        distance=args.distance,
        ar_weight=args.ar_weight,
        ar_target=args.ar_target,
        label_smoothing=args.label_smoothing,
        states_per_block=args.states_per_block,
        batch_size=args.batch_size,
        max_steps=args.max_steps,
        max_train_tokens=args.max_train_tokens,
        lr=args.lr,
        warmup_steps=args.warmup_steps,
        max_packed_tokens=args.max_packed_tokens,
        save_every=args.save_every,
        snapshot_every=args.snapshot_every,
        resume=args.resume,
        seed=args.seed,
        mixed_precision=mixed_precision(args),
        augment_per_state=args.augment,
        clean=CleanConfig(args.max_run, args.ngram, args.max_ngram_repeats, args.min_sentence_tokens),
        lora=args.lora,
        lora_r=args.lora_r,
        log_every=args.log_every,
    )
    res = train(cfg)
    print(
        f"train-cllm: {res.steps} steps, {res.train_tokens} packed tokens, {res.consistency_positions} "
        f"consistency positions, {res.wall_time_s:.0f}s -> {res.out}",
        file=sys.stderr,
    )
    return 0


def mixed_precision(args: argparse.Namespace) -> str:
    """``--mixed-precision auto`` resolved on this machine (said once on stderr); Accelerate trains on CUDA
    when there is a GPU, so that is the device asked about."""
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    requested = {"auto": "auto", "bf16": "bf16", "no": "fp32"}[args.mixed_precision]
    autocast, why = training_autocast(requested, device)
    if why:
        log(why)
    return "bf16" if autocast else "no"

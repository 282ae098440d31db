"""``fastforward collect``: Jacobi trajectories of a model on a dataset, one JSONL record per (prompt, block).

Resumable: rerun the same command after an interruption and it continues where the file ends.

Under ``accelerate launch --num_processes N`` each process collects every N-th prompt into a shard of its
own (``OUT.rankR-of-N``, resumable like the single file); when all are done the first process merges them
into ``OUT`` (each (prompt, block) once).
"""

from __future__ import annotations

import argparse
import sys

from fastforward.cllm.collect import CollectConfig, PromptJob, collect_trajectories
from fastforward.cllm.trajectories import merge_trajectory_files
from fastforward.data import DATASETS, load_dataset, render_prompt
from fastforward.distributed import process_state, shard, shard_path
from fastforward.errors import FastForwardError
from fastforward.models.loading import DTYPES, load_model


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("collect", help="collect Jacobi trajectories for CLLM training (resumable)")
    p.add_argument("--model", default="smollm2-135m", help="registry name, HF model directory, or .gguf file")
    p.add_argument("--dataset", default="gsm8k", choices=list(DATASETS), help="prompts from this dataset")
    p.add_argument("--data-path", default=None, help="a JSONL of prompts instead of --dataset")
    p.add_argument("--split", default="train", help="gsm8k split (train | heldout | all)")
    p.add_argument("--limit", type=int, default=None, help="number of prompts")
    p.add_argument("--block-size", type=int, default=16, help="Jacobi block size n of the trajectories")
    p.add_argument("--max-new-tokens", type=int, default=256, help="most new tokens per answer")
    p.add_argument("--batch-size", type=int, default=4, help="prompts per forward")
    p.add_argument("--dtype", default="bfloat16", choices=list(DTYPES), help="dtype of the collecting model")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: all cores)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random initial block states")
    p.add_argument("--no-labels", action="store_true", help="do not store ground-truth answer ids")
    p.add_argument("--out", required=True, help="trajectory JSONL (appended to; resumes)")
    p.set_defaults(func=run)


def gold_answer_text(sample) -> str | None:
    """The ground-truth answer text: GSM8K's worked solution, else a dataset's reference answer."""
    return sample.meta.get("solution") or sample.meta.get("answer") or sample.answer


def run(args: argparse.Namespace) -> int:
    if args.split and args.dataset == "gsm8k" and args.split == "heldout":
        print(
            "collect: warning: collecting on the held-out split (numbers are reported there)", file=sys.stderr
        )
    samples = load_dataset(args.dataset, args.limit, split=args.split, data_path=args.data_path)
    state = process_state()
    rank, world = state.process_index, state.num_processes
    device = str(state.device) if world > 1 and args.device.startswith("cuda") else args.device
    loaded = load_model(args.model, args.dtype, device, args.threads)
    tok = loaded.tokenizer
    if tok is None:
        raise FastForwardError("collect needs a model with a tokenizer")
    eos = loaded.eos_token_ids
    jobs = []
    for s in samples:
        prompt = render_prompt(tok, [{"role": "user", "content": s.turns[0]}])
        answer = None
        gold = None if args.no_labels else gold_answer_text(s)
        if gold:
            answer = list(tok(gold, add_special_tokens=False)["input_ids"]) + ([eos[0]] if eos else [])
        jobs.append(PromptJob(s.id, prompt, answer))
    cfg = CollectConfig(args.block_size, args.max_new_tokens, args.batch_size, args.seed)
    out = args.out if world == 1 else shard_path(args.out, rank, world)
    jobs = shard(jobs, rank, world)
    stats = collect_trajectories(loaded.model, eos, jobs, out, cfg, progress=state.is_main_process)
    print(
        f"collect{'' if world == 1 else f' [rank {rank}/{world}]'}: {stats.prompts} prompts done ({stats.prompts_skipped} already complete), {stats.records} "
        f"blocks, {stats.tokens} tokens in {stats.wall_time_s:.1f}s ({stats.tokens_per_s:.1f} tok/s), "
        f"{stats.states / max(1, stats.records):.1f} states/block -> {out}",
        file=sys.stderr,
    )
    if world > 1:
        state.wait_for_everyone()
        if state.is_main_process:
            parts = [shard_path(args.out, r, world) for r in range(world)]
            added, total = merge_trajectory_files(args.out, parts)
            print(
                f"collect: merged {world} shards into {args.out}: {added} new, {total} records",
                file=sys.stderr,
            )
        state.wait_for_everyone()
    return 0

"""Self-distillation data for Chimera: the target answers real prompts, and its last hidden states are cached.

Prompts: ShareGPT first human turns and the GSM8K *train* part (GSM8K's held-out part and a distant ShareGPT
slice are kept for evaluation). The target answers greedily (prompts decoded ``gen_batch_size`` at a time with
left padding: the same tokens as batch-1 AR in fp32, several times less CPU); one more forward over prompt + answer gives the
last hidden states ``h_llm`` and the target's argmax after every position (the labels: under greedy
verification the draft must predict exactly what the target would choose). Each record is one small
safetensors file, written once: a rerun skips the records already on disk (resume after interruption).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from fastforward.core.batched import batched_greedy
from fastforward.data import Sample, load_dataset, render_prompt
from fastforward.errors import FastForwardError, read_user_text
from fastforward.log import log
from fastforward.models.loading import LoadedModel

HELDOUT_SHAREGPT_OFFSET = 8000  # evaluation ShareGPT prompts come from beyond this index


@dataclass(frozen=True)
class DistillConfig:
    sharegpt: int = 40  # prompts from ShareGPT
    gsm8k: int = 40  # prompts from the GSM8K train part
    max_new_tokens: int = 128
    max_prompt_tokens: int = 384
    heldout: bool = False  # evaluation prompts instead of training prompts
    hidden_dtype: str = "bfloat16"  # storage dtype of h_llm on disk
    gen_batch_size: int = 8  # prompts answered per batched greedy generation


def prompt_samples(cfg: DistillConfig) -> list[Sample]:
    """Training: ShareGPT [0, n) + GSM8K train part; held-out: ShareGPT [offset, offset + n) + GSM8K held-out."""
    out: list[Sample] = []
    if cfg.sharegpt:
        start = HELDOUT_SHAREGPT_OFFSET if cfg.heldout else 0
        out += load_dataset("sharegpt", start + cfg.sharegpt)[start:]
    if cfg.gsm8k:
        out += load_dataset("gsm8k", cfg.gsm8k, split="heldout" if cfg.heldout else "train")
    return out


def target_states(model: torch.nn.Module, ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """One forward: last hidden states [L, d] and the target's argmax after every position [L]."""
    with torch.inference_mode():
        out = model(input_ids=torch.tensor([ids], device=model.device), output_hidden_states=True)
    return out.hidden_states[-1][0], out.logits[0].argmax(-1)


def collect_distill_data(
    target: LoadedModel, out_dir: str | Path, cfg: DistillConfig, rank: int = 0, world: int = 1
) -> Path:
    """Write one record per prompt into ``out_dir`` (skipping records already there); returns the dir.

    With ``world`` processes, rank ``rank`` answers every ``world``-th prompt (records are one file each,
    so the shards need no merge); the caller waits for all ranks before training."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"target": target.name, "hidden_size": _hidden(target), "config": asdict(cfg)}
    meta_path = out / "meta.json"
    if meta_path.exists():
        try:
            old = json.loads(read_user_text(meta_path, "Chimera data meta"))
        except json.JSONDecodeError as e:
            raise FastForwardError(f"{meta_path} is not JSON ({e}); use another --data dir") from None
        if not isinstance(old, dict):
            raise FastForwardError(f"{meta_path} is not a Chimera data meta; use another --data dir")
        if old.get("hidden_size") != meta["hidden_size"] or old.get("target") != meta["target"]:
            raise FastForwardError(
                f"{out} holds data of another target ({old.get('target')}); use another --data dir"
            )
    if rank == 0:  # atomically: another rank may be reading it for the check above
        tmp = meta_path.with_name(meta_path.name + ".tmp")
        tmp.write_text(json.dumps(meta, indent=1))
        tmp.replace(meta_path)
    prompts = []
    for sample in prompt_samples(cfg):
        ids = render_prompt(target.tokenizer, [{"role": "user", "content": sample.turns[0]}])
        prompts.append(ids[-cfg.max_prompt_tokens :])
    return write_records(target, prompts, out, cfg, only=range(rank, len(prompts), world))


def write_records(
    target: LoadedModel,
    prompts: list[list[int]],
    out: Path,
    cfg: DistillConfig,
    only: Iterable[int] | None = None,
) -> Path:
    """Answer each prompt (greedy) and store ids, target states and labels; record i <-> prompts[i].

    Only prompts without a record on disk are answered, ``gen_batch_size`` at a time; each record is written
    atomically, so an interrupted run loses at most the batch in flight and never leaves a partial file.
    """
    out.mkdir(parents=True, exist_ok=True)
    storage = getattr(torch, cfg.hidden_dtype)
    todo = [i for i in (range(len(prompts)) if only is None else only) if not _record_path(out, i).exists()]
    step = max(1, cfg.gen_batch_size)
    written = 0
    for start in range(0, len(todo), step):
        chunk = todo[start : start + step]
        answers = batched_greedy(
            target.model, [prompts[i] for i in chunk], cfg.max_new_tokens, target.eos_token_ids, step
        )
        for i, answer in zip(chunk, answers, strict=True):
            ids = prompts[i]
            hidden, nxt = target_states(target.model, ids + answer)
            record = {
                "ids": torch.tensor(ids + answer, dtype=torch.long),
                "hidden": hidden.to(storage).contiguous(),
                "next": nxt.to(torch.long).contiguous(),
                "prompt_len": torch.tensor([len(ids)], dtype=torch.long),
            }
            path = _record_path(out, i)
            tmp = path.with_name(path.name + ".tmp")
            save_file(record, str(tmp))
            tmp.replace(path)
            written += 1
        log(f"chimera data: {written}/{len(todo)} new records in {out}")
    return out


def _record_path(out: Path, i: int) -> Path:
    return out / f"rec_{i:06d}.safetensors"


def records(data_dir: str | Path) -> list[Path]:
    return sorted(Path(data_dir).glob("rec_*.safetensors"))


def load_record(path: Path) -> dict[str, torch.Tensor]:
    """ids [L], hidden [L, d] (float32), next [L], prompt_len (int)."""
    rec = load_file(str(path))
    return {
        "ids": rec["ids"],
        "hidden": rec["hidden"].float(),
        "next": rec["next"],
        "prompt_len": int(rec["prompt_len"][0]),
    }


def _hidden(target: LoadedModel) -> int:
    cfg = target.model.config
    cfg = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    return int(cfg.hidden_size)

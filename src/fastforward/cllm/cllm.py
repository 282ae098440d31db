"""Consistency training (CLLM Algorithm 2, or Jacobi Forcing) over packed trajectories, with Accelerate.

One optimizer step = ``batch_size`` prompts, each packed into one sequence: one forward gives the AR loss
(eq. 6) and the consistency loss. ``objective="cllm"`` packs noisy states in the context of clean earlier
blocks (packing.py; eq. 4 global or eq. 5 local); ``objective="forcing"`` packs every block's noisy state
in the context of the earlier *noisy* blocks, picked by a cyclic noise schedule (forcing.py, Jacobi Forcing). Accelerate makes the same
loop run on a CPU (bf16 autocast), one GPU, or several under ``accelerate launch`` / torchrun (DDP or FSDP,
configured by ``accelerate config``). Checkpoints (model, optimizer, scheduler, RNG, step) go to
``OUT/checkpoints/step-N``; ``--resume`` continues from the newest. The result is a plain HF model directory
(weights + tokenizer + ``cllm_training.json``) that ``--model OUT`` loads anywhere.

Sampling is keyed by (seed, step), so a resumed run draws the same prompts and states as an uninterrupted one.
"""

from __future__ import annotations

import json
import math
import random
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from accelerate.utils import set_seed

from fastforward.cllm.augment import CleanConfig, CleanReport, prepare
from fastforward.cllm.forcing import STRATEGIES, pack_forcing
from fastforward.cllm.losses import DISTANCES, ar_loss, consistency_loss, total_loss
from fastforward.cllm.packing import PackedExample, collate, pack_prompt
from fastforward.cllm.trajectories import TrajectoryRecord, group_by_prompt, read_records
from fastforward.distributed import accelerator, check_replicas_agree
from fastforward.errors import FastForwardError
from fastforward.models.loading import load_model


@dataclass(frozen=True)
class TrainConfig:
    model: str
    data: str
    out: str
    objective: str = "cllm"  # cllm | forcing (Jacobi Forcing: noisy blocks see earlier noisy blocks)
    loss: str = "global"  # global (eq. 4) | local (eq. 5); objective cllm only
    noise_window: int = 8  # forcing: w, blocks per clean -> fully noisy ramp of the noise schedule
    noise_strategy: str = "progressive"  # forcing: progressive | reverse | random
    distance: str = "fkl"  # fkl | rkl | js
    ar_weight: float = 10.0  # w in eq. 7 (the reference uses 10)
    ar_target: str = "teacher"  # teacher | labels
    label_smoothing: float = 0.1
    states_per_block: int = 2
    batch_size: int = 1  # prompts per step
    max_steps: int = 100
    max_train_tokens: int = 0  # > 0: stop once this many packed tokens were fed (equal budgets across runs)
    lr: float = 1e-4
    warmup_steps: int = 10
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    max_packed_tokens: int = 2048
    save_every: int = 0  # 0: only at the end
    keep_checkpoints: int = 2
    snapshot_every: int = 0  # > 0: a loadable bf16 model dir OUT/snapshots/step-N every N steps (curves)
    resume: bool = False
    seed: int = 0
    mixed_precision: str = "bf16"  # bf16 | no
    augment_per_state: int = 1
    clean: CleanConfig = field(default_factory=CleanConfig)
    lora: bool = False
    lora_r: int = 16
    log_every: int = 10

    def validate(self) -> None:
        if self.objective not in ("cllm", "forcing"):
            raise FastForwardError(f"--objective must be cllm or forcing, got '{self.objective}'")
        if self.noise_window < 1:
            raise FastForwardError(f"--noise-window must be >= 1, got {self.noise_window}")
        if self.noise_strategy not in STRATEGIES:
            raise FastForwardError(f"--noise-strategy must be one of {', '.join(STRATEGIES)}")
        if self.max_train_tokens < 0:
            raise FastForwardError("--max-train-tokens must be >= 0")
        if self.loss not in ("global", "local"):
            raise FastForwardError(f"--loss must be global or local, got '{self.loss}'")
        if self.distance not in DISTANCES:
            raise FastForwardError(f"--distance must be one of {', '.join(DISTANCES)}")
        if self.ar_target not in ("teacher", "labels"):
            raise FastForwardError(f"--ar-target must be teacher or labels, got '{self.ar_target}'")
        if self.max_steps < 1 or self.batch_size < 1 or self.states_per_block < 1:
            raise FastForwardError("--max-steps, --batch-size and --states-per-block must be >= 1")
        if self.save_every < 0 or self.snapshot_every < 0:
            raise FastForwardError("--save-every and --snapshot-every must be >= 0")
        if self.mixed_precision not in ("bf16", "no"):
            raise FastForwardError("--mixed-precision must be bf16 or no")


@dataclass
class TrainResult:
    out: Path
    steps: int
    train_tokens: int  # packed tokens fed (this run + resumed part)
    consistency_positions: int
    wall_time_s: float
    report: CleanReport
    last_losses: dict[str, float]


def load_training_groups(
    cfg: TrainConfig, records: list[TrajectoryRecord], delimiters: set[int] | None
) -> tuple[list[list[TrajectoryRecord]], CleanReport]:
    kept, report = prepare(records, cfg.clean, delimiters, cfg.augment_per_state, cfg.seed)
    if cfg.ar_target == "labels" and not any(r.answer_ids for r in kept):
        raise FastForwardError(
            f"{cfg.data}: --ar-target labels needs answer_ids (gold answers) in the records"
        )
    groups = list(group_by_prompt(kept).values())
    if not groups:
        raise FastForwardError(f"{cfg.data}: cleaning dropped every record ({report.summary()})")
    return groups, report


def step_batch(
    groups: list[list[TrajectoryRecord]], cfg: TrainConfig, step: int, rank: int = 0, world: int = 1
) -> list[PackedExample]:
    """The packed examples of process ``rank`` (of ``world``) at optimizer step ``step`` (0-based):
    epoch-wise shuffled prompts, keyed RNG. A step covers ``world * batch_size`` consecutive prompts of the
    shuffled order and each process takes its own ``batch_size`` of them, so N processes see N times the
    data per step instead of N copies of the same batch; one process (rank 0 of 1) is the unsharded order."""
    n = len(groups)
    out: list[PackedExample] = []
    tries = 0
    k = (step * world + rank) * cfg.batch_size
    while len(out) < cfg.batch_size and tries < 4 * cfg.batch_size + n:
        epoch, pos = divmod(k, n)
        order = list(range(n))
        random.Random(f"order:{cfg.seed}:{epoch}").shuffle(order)
        rng = random.Random(f"states:{cfg.seed}:{step}:{k}")
        if cfg.objective == "forcing":
            ex = pack_forcing(
                groups[order[pos]], rng, cfg.noise_window, cfg.noise_strategy, cfg.max_packed_tokens
            )
        else:
            ex = pack_prompt(
                groups[order[pos]], rng, cfg.loss, cfg.states_per_block, cfg.ar_target, cfg.max_packed_tokens
            )
        if ex is not None:
            out.append(ex)
        k += 1
        tries += 1
    return out


def compute_losses(
    model: torch.nn.Module, batch: dict[str, torch.Tensor], cfg: TrainConfig
) -> dict[str, Any]:
    out = model(
        input_ids=batch["input_ids"],
        position_ids=batch["position_ids"],
        attention_mask=batch["attention_mask"],
    )
    logits = out.logits.flatten(0, 1)  # [B * L, V]
    s_idx, t_idx = batch["student_idx"], batch["teacher_idx"]
    cons = consistency_loss(
        logits[s_idx],
        logits[t_idx].detach(),
        torch.ones_like(s_idx, dtype=torch.bool),
        cfg.distance,
        batch.get("student_weight"),
    )
    ar = ar_loss(logits[batch["ar_idx"]], batch["ar_targets"], cfg.label_smoothing)
    return {"loss": total_loss(cons, ar, cfg.ar_weight), "consistency": cons, "ar": ar}


def _checkpoints(out: Path) -> list[Path]:
    d = out / "checkpoints"
    if not d.exists():
        return []
    cps = [p for p in d.glob("step-*") if (p / "trainer_state.json").exists()]
    return sorted(cps, key=lambda p: int(p.name.split("-")[1]))


def _apply_lora(model: torch.nn.Module, r: int) -> torch.nn.Module:
    try:
        from peft import LoraConfig, get_peft_model  # optional dependency, only for --lora
    except ImportError:
        raise FastForwardError("--lora needs peft: pip install peft") from None
    cfg = LoraConfig(
        r=r, lora_alpha=2 * r, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM"
    )
    return get_peft_model(model, cfg)


def train(cfg: TrainConfig, log=None) -> TrainResult:
    """Run (or resume) consistency training; writes the HF model directory ``cfg.out``."""
    cfg.validate()
    log = log or (lambda m: print(m, file=sys.stderr, flush=True))
    out = Path(cfg.out)
    if out.exists() and (out / "cllm_training.json").exists() and not cfg.resume:
        raise FastForwardError(f"{out} already holds a trained model; pass --resume or a new --out")
    cps = _checkpoints(out)
    if cps and not cfg.resume:
        raise FastForwardError(f"{out} holds checkpoints; pass --resume to continue or choose a new --out")

    # bf16 autocast is ours, not Accelerate's: its process-wide state refuses a second, different
    # mixed_precision in one process (tests, notebooks, a Chimera run before this one)
    records = read_records(cfg.data)  # before the model loads: a bad file fails in one line, at once
    if not records:
        raise FastForwardError(f"{cfg.data}: no trajectory records")
    accel = accelerator()
    bf16 = cfg.mixed_precision == "bf16"
    set_seed(cfg.seed)
    loaded = load_model(cfg.model, "float32")
    model, tok = loaded.model, loaded.tokenizer
    impl = getattr(model.config, "_attn_implementation", "sdpa")
    if impl not in ("sdpa", "eager"):
        raise FastForwardError(
            f"packed training needs a 4D attention mask: attention '{impl}' does not take one"
        )
    model.requires_grad_(True)
    if cfg.lora:
        model = _apply_lora(model, cfg.lora_r)
    model.train()

    delimiters = _sentence_delimiters(tok)
    groups, report = load_training_groups(cfg, records, delimiters)
    log(report.summary())
    log(f"train: {len(groups)} prompts, {sum(len(g) for g in groups)} blocks")

    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / max(1, cfg.warmup_steps)))
    model, opt, sched = accel.prepare(model, opt, sched)

    start_step, tokens, positions, wall_before = 0, 0, 0, 0.0
    if cfg.resume and cps:
        accel.load_state(str(cps[-1]))
        state = json.loads((cps[-1] / "trainer_state.json").read_text())
        start_step, tokens, positions = state["step"], state["train_tokens"], state["consistency_positions"]
        wall_before = float(state.get("wall_time_s", 0.0))
        log(f"train: resumed from {cps[-1]} (step {start_step})")

    t0 = time.perf_counter()
    last: dict[str, float] = {}
    dtype = torch.float32
    done = start_step
    for step in range(start_step, cfg.max_steps):
        if budget_spent(tokens, cfg.max_train_tokens):
            break
        examples = step_batch(groups, cfg, step, accel.process_index, accel.num_processes)
        if not examples:
            raise FastForwardError("no trainable example could be packed")
        batch = {k: v.to(accel.device) for k, v in collate(examples, dtype).items()}
        with torch.autocast(accel.device.type, dtype=torch.bfloat16, enabled=bf16):
            losses = compute_losses(model, batch, cfg)
        accel.backward(losses["loss"])
        if cfg.max_grad_norm:
            accel.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        counts = torch.tensor(
            [sum(e.length for e in examples), batch["student_idx"].numel()], device=accel.device
        )
        counts = accel.reduce(
            counts, reduction="sum"
        )  # every process's share: the run's tokens, not one rank's
        tokens += int(counts[0])
        positions += int(counts[1])
        last = {k: float(v.detach()) for k, v in losses.items()}
        if any(math.isnan(v) for v in last.values()):
            raise FastForwardError(f"loss became NaN at step {step + 1}")
        done = step + 1
        final_step = done == cfg.max_steps or budget_spent(tokens, cfg.max_train_tokens)
        if done % cfg.log_every == 0 or final_step:
            el = time.perf_counter() - t0
            log(
                f"step {done}/{cfg.max_steps} loss {last['loss']:.4f} consistency {last['consistency']:.4f} "
                f"ar {last['ar']:.4f} tokens {tokens} ({el / max(1, done - start_step):.2f} s/step)"
            )
        if cfg.save_every and done % cfg.save_every == 0 and not final_step:
            wall_so_far = wall_before + time.perf_counter() - t0
            _save_checkpoint(accel, out, done, tokens, positions, cfg.keep_checkpoints, wall_so_far)
        if cfg.snapshot_every and done % cfg.snapshot_every == 0 and accel.is_main_process:
            _save_snapshot(accel.unwrap_model(model), tok, out, done, tokens, positions)

    wall = time.perf_counter() - t0
    accel.wait_for_everyone()
    checksum = check_replicas_agree(accel, accel.unwrap_model(model))
    if accel.is_main_process:
        final = accel.unwrap_model(model)
        if cfg.lora:
            final = final.merge_and_unload()
        final.save_pretrained(out, state_dict=accel.get_state_dict(model) if not cfg.lora else None)
        if tok is not None:
            tok.save_pretrained(out)
        meta = {
            "config": _jsonable(asdict(cfg)),
            "steps": done,
            "train_tokens": tokens,
            "consistency_positions": positions,
            "wall_time_s_this_run": wall,
            "wall_time_s": wall_before + wall,  # every run of a resumed training together
            "processes": accel.num_processes,
            "replica_checksum": checksum,  # equal on every rank (checked); None for one process
            "data_report": report.to_dict(),
            "last_losses": last,
        }
        (out / "cllm_training.json").write_text(json.dumps(meta, indent=2) + "\n")
    return TrainResult(out, done, tokens, positions, wall, report, last)


def budget_spent(tokens: int, max_train_tokens: int) -> bool:
    """Whether a token-budgeted run (``max_train_tokens`` > 0) has fed its budget: runs compared at an equal
    training budget stop at the first step that reaches it."""
    return max_train_tokens > 0 and tokens >= max_train_tokens


def _save_checkpoint(
    accel, out: Path, step: int, tokens: int, positions: int, keep: int, wall_time_s: float = 0.0
) -> None:
    path = out / "checkpoints" / f"step-{step}"
    accel.save_state(str(path))
    if accel.is_main_process:
        state = {
            "step": step,
            "train_tokens": tokens,
            "consistency_positions": positions,
            "wall_time_s": wall_time_s,
        }
        (path / "trainer_state.json").write_text(json.dumps(state) + "\n")  # written last: marks complete
        for old in _checkpoints(out)[:-keep] if keep > 0 else []:
            shutil.rmtree(old, ignore_errors=True)


def _save_snapshot(model, tok, out: Path, step: int, tokens: int, positions: int) -> None:
    """A plain HF model dir (bf16 weights, half the size) for measuring the training curve afterwards."""
    path = out / "snapshots" / f"step-{step}"
    if (path / "snapshot.json").exists():  # a resumed run passing the same step again
        return
    state = {k: v.detach().to(torch.bfloat16) for k, v in model.state_dict().items()}
    model.save_pretrained(path, state_dict=state)
    if tok is not None:
        tok.save_pretrained(path)
    meta = {"step": step, "train_tokens": tokens, "consistency_positions": positions}
    (path / "snapshot.json").write_text(json.dumps(meta) + "\n")  # written last: marks complete


def _sentence_delimiters(tok) -> set[int] | None:
    """Token ids that end a sentence for the sentence-repetition rule (newline, '.', '?', '!')."""
    if tok is None:
        return None
    ids: set[int] = set()
    for s in ("\n", ".", "?", "!", ".\n", "\n\n"):
        enc = tok(s, add_special_tokens=False)["input_ids"]
        if len(enc) == 1:
            ids.add(int(enc[0]))
    return ids or None


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    return x

"""Train a Chimera draft on cached self-distillation data; save it apart from the target; evaluate heads.

Loss (eqs. 5-7): the sum over heads of the cross-entropy against the target's own next token, plus
``mse_weight`` x the MSE between ``h_full`` and the target's last hidden state (both really in the loss; the
Medusa ablation has no ``h_full`` and so no MSE term). Only answer positions are scored: those are the ones
the draft meets when decoding. Accelerate runs the loop (with our bf16 autocast, CPU or GPU); ``save_state``
checkpoints make a run resumable. The saved draft is ``draft.safetensors`` (only the draft's own weights)
plus ``chimera_config.json`` (see :mod:`fastforward.chimera.checkpoint`); the target's embeddings and LM head
are re-attached at load time.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch.nn import functional as F

from fastforward.chimera.checkpoint import save_draft, target_matrices
from fastforward.chimera.data import load_record, records
from fastforward.chimera.model import ChimeraConfig, ChimeraDraft
from fastforward.distributed import accelerator, check_replicas_agree
from fastforward.errors import FastForwardError
from fastforward.log import log


@dataclass(frozen=True)
class TrainConfig:
    data: str
    out: str
    num_heads: int = 4
    variant: str = "chimera"  # chimera | no_residual | medusa
    vocab: str = "shared"  # shared | own
    steps: int = 200
    batch_size: int = 4
    max_len: int = 256
    lr: float = 1e-3
    warmup: int = 20
    weight_decay: float = 0.0
    mse_weight: float = 1.0
    ce_positions: int = 0  # per head and step, CE on at most this many random scored positions (0 = all)
    clip: float = 1.0
    bf16: bool = True
    seed: int = 0
    save_every: int = 100
    log_every: int = 10


# --------------------------------------------------------------------------- a new draft


def new_draft(
    model: torch.nn.Module, num_heads: int = 4, variant: str = "chimera", vocab: str = "shared"
) -> ChimeraDraft:
    embed, head, bias = target_matrices(model)
    cfg = ChimeraConfig(head.shape[1], head.shape[0], num_heads, variant, vocab)
    return ChimeraDraft(cfg, embed.float(), head.float(), None if bias is None else bias.float())


# --------------------------------------------------------------------------- batches and loss


def make_batch(recs: list[dict], max_len: int) -> dict[str, torch.Tensor]:
    """Right-padded batch of windows (each ending at most ``max_len`` tokens, covering the answer start).

    ids/next: [B, L] long, hidden: [B, L, d], score: [B, L] bool (answer positions j: x[j+1] is an answer
    token predicted after position j)."""
    wins = []
    for r in recs:
        n, plen = len(r["ids"]), r["prompt_len"]
        start = max(0, min(plen - 1, n - max_len))
        wins.append((r, start, min(n, start + max_len)))
    length = max(e - s for _, s, e in wins)
    b, d = len(recs), recs[0]["hidden"].shape[1]
    ids = torch.zeros(b, length, dtype=torch.long)
    nxt = torch.zeros(b, length, dtype=torch.long)
    hidden = torch.zeros(b, length, d)
    score = torch.zeros(b, length, dtype=torch.bool)
    for i, (r, s, e) in enumerate(wins):
        m = e - s
        ids[i, :m], nxt[i, :m], hidden[i, :m] = r["ids"][s:e], r["next"][s:e], r["hidden"][s:e]
        j = torch.arange(s, e)
        score[i, :m] = j >= r["prompt_len"] - 1
    return {"ids": ids, "next": nxt, "hidden": hidden, "score": score}


def head_masks(score: torch.Tensor, num_heads: int) -> list[torch.Tensor]:
    """Head k can be scored at j >= k + 1 (it reads h_llm[j-1-k]). score: [B, L] -> K x [B, L]."""
    out = []
    for k in range(num_heads):
        m = score.clone()
        m[:, : k + 1] = False
        out.append(m)
    return out


def chimera_loss(
    draft: ChimeraDraft,
    batch: dict,
    mse_weight: float,
    ce_positions: int = 0,
    forward: Callable[..., tuple[torch.Tensor, torch.Tensor | None]] | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Sum of per-head CE (mean over scored positions) + mse_weight * MSE(h_full, h_llm).

    ``forward`` is the module to call for the draft's forward when it is wrapped (Accelerate's DDP wrapper:
    only a call through the wrapper arms the gradient all-reduce); ``draft`` itself supplies the heads.

    ``ce_positions > 0`` scores the CE on that many random positions per head: the V x d vocabulary
    projection is nearly all of a step's cost, so on a CPU a batch of many sequences with a sample of their
    positions sees more distinct text per FLOP than a few whole sequences (an unbiased estimate of the same
    loss). The cheap MSE term always uses every position."""
    z, h_full = (forward or draft)(batch["ids"], batch["hidden"])  # [B, K, L, d] each
    masks = head_masks(batch["score"], draft.cfg.num_heads)
    ce_terms = []
    for k, m in enumerate(masks):
        if not m.any():
            continue
        rows, target = z[:, k][m], batch["next"][m]  # [N, d], [N]
        if 0 < ce_positions < len(target):
            pick = torch.randperm(len(target), device=target.device)[:ce_positions]
            rows, target = rows[pick], target[pick]
        logits = draft.logits(rows, k).float()  # [N, V]
        ce_terms.append(F.cross_entropy(logits, target))
    ce = torch.stack(ce_terms).sum() if ce_terms else z.sum() * 0
    parts = {"ce": float(ce.detach())}
    loss = ce
    if h_full is not None:
        diffs = [
            ((h_full[:, k][m].float() - batch["hidden"][m].float()) ** 2).mean()
            for k, m in enumerate(masks)
            if m.any()
        ]
        mse = torch.stack(diffs).mean() if diffs else h_full.sum() * 0
        parts["mse"] = float(mse.detach())
        loss = loss + mse_weight * mse
    parts["loss"] = float(loss.detach())
    return loss, parts


@torch.no_grad()
def head_topk_accuracy(draft: ChimeraDraft, data_dir: str | Path, max_len: int = 512, top: int = 5) -> dict:
    """Paper Table 5 / Fig. 8: for each head, how often the target's token is in its top-1..top-``top``.

    Teacher-forced over held-out records (scored answer positions only). -> {"head_topk": K x top, ...}."""
    kk = draft.cfg.num_heads
    hits = torch.zeros(kk, top)
    counts = torch.zeros(kk)
    draft.eval()
    for path in records(data_dir):
        batch = make_batch([load_record(path)], max_len)
        dtype = draft.heads[0].w1.weight.dtype
        z, _ = draft(batch["ids"], batch["hidden"].to(dtype))
        for k, m in enumerate(head_masks(batch["score"], kk)):
            if not m.any():
                continue
            ranks = draft.logits(z[:, k][m], k).topk(top, -1).indices  # [N, top]
            found = (ranks == batch["next"][m][:, None]).int().cumsum(-1).clamp_max(1)  # [N, top]
            hits[k] += found.sum(0).float()
            counts[k] += m.sum()
    acc = (hits / counts.clamp_min(1)[:, None]).tolist()
    return {"head_topk": [[round(a, 4) for a in row] for row in acc], "positions": counts.int().tolist()}


# --------------------------------------------------------------------------- the loop


def train(cfg: TrainConfig, model: torch.nn.Module, resume: bool = False) -> tuple[ChimeraDraft, dict]:
    """Train (or resume) a draft for ``model`` on ``cfg.data``; saves into ``cfg.out``; returns draft, log."""
    if cfg.ce_positions < 0:
        raise FastForwardError(f"ce_positions must be >= 0 (0 = every position), got {cfg.ce_positions}")
    files = records(cfg.data)
    if not files:
        raise FastForwardError(f"no training records in '{cfg.data}' (run the data step first)")
    out = Path(cfg.out)
    ckpt = out / "checkpoint"
    torch.manual_seed(cfg.seed)
    draft = new_draft(model, cfg.num_heads, cfg.variant, cfg.vocab)
    params = [p for p in draft.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)

    def lr_at(step: int) -> float:  # linear warm-up, cosine to 10%
        if step < cfg.warmup:
            return (step + 1) / cfg.warmup
        t = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, t)))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    # bf16 autocast is ours, not Accelerate's: its process-wide state refuses a second, different
    # mixed_precision in one process (tests, notebooks running several trainings)
    acc = accelerator()
    draft, opt, sched = acc.prepare(draft, opt, sched)
    step, history = 0, []
    if resume and (ckpt / "progress.json").exists():
        acc.load_state(str(ckpt))
        prog = json.loads((ckpt / "progress.json").read_text())
        step, history = prog["step"], prog["history"]
        log(f"chimera: resumed from step {step}")
    rng = random.Random(cfg.seed + step)
    order: list[Path] = []
    raw = acc.unwrap_model(draft)
    cache: dict[Path, dict] = {}
    t0 = time.perf_counter()
    rank, world = acc.process_index, acc.num_processes
    while step < cfg.steps:
        # every process draws the same global order (same seed) and takes its own batch_size slice of each
        # step's world * batch_size records: N processes train on N times the data, not N copies of it
        glob = cfg.batch_size * world
        while len(order) < glob:
            order += rng.sample(files, len(files))
        step_recs, order = order[:glob], order[glob:]
        chosen = step_recs[rank * cfg.batch_size : (rank + 1) * cfg.batch_size]
        for p in chosen:
            if p not in cache and len(cache) < 4096:  # records are small; keep them in memory
                cache[p] = load_record(p)
        recs = [cache[p] if p in cache else load_record(p) for p in chosen]
        batch = {k: v.to(acc.device) for k, v in make_batch(recs, cfg.max_len).items()}
        draft.train()
        with torch.autocast(acc.device.type, dtype=torch.bfloat16, enabled=cfg.bf16):
            loss, parts = chimera_loss(raw, batch, cfg.mse_weight, cfg.ce_positions, forward=draft)
        acc.backward(loss)
        if cfg.clip:
            acc.clip_grad_norm_(draft.parameters(), cfg.clip)
        opt.step()
        sched.step()
        opt.zero_grad()
        step += 1
        if step % cfg.log_every == 0 or step == cfg.steps:
            parts.update(step=step, lr=sched.get_last_lr()[0], s=round(time.perf_counter() - t0, 1))
            history.append(parts)
            log(
                "chimera: "
                + " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in parts.items())
            )
        if step % cfg.save_every == 0 or step == cfg.steps:
            acc.save_state(str(ckpt))
            if acc.is_main_process:
                (ckpt / "progress.json").write_text(json.dumps({"step": step, "history": history}))
    acc.wait_for_everyone()
    checksum = check_replicas_agree(acc, raw)
    if acc.is_main_process:
        meta = {"train": asdict(cfg), "steps_done": step, "history": history, "processes": world}
        save_draft(raw, out, {**meta, "replica_checksum": checksum})
    return raw.eval(), {"steps": step, "history": history}

"""Several processes, one job: rank, sharding and a replica check for runs under ``accelerate launch``.

Training already runs under Accelerate (DDP on CPU with gloo, on GPUs with NCCL, FSDP from an accelerate
config); what needs care is everything around the model: data collection must split prompts by rank and
leave one complete file, and a trainer must not silently let its replicas drift apart (e.g. a forward
through the unwrapped model skips DDP's gradient all-reduce). One process without a launcher is the
ordinary case: rank 0 of 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import torch
from accelerate import Accelerator, PartialState

from fastforward.errors import FastForwardError

T = TypeVar("T")


def no_cuda() -> bool:
    """Accelerate joins the processes of a launch on a CPU-only machine (gloo) only when told ``cpu=True``;
    without it every process of ``accelerate launch --num_processes N`` believes it is alone."""
    return not torch.cuda.is_available()


def process_state() -> PartialState:
    """Accelerate's view of this process (rank, world size, device); rank 0 of 1 without a launcher."""
    return PartialState(cpu=no_cuda())


def accelerator() -> Accelerator:
    """The trainers' Accelerator: DDP across the launched processes, on CUDA or, without it, CPU (gloo).

    Mixed precision is not Accelerate's here: its process-wide state refuses a second, different setting in
    one process (tests, notebooks), so the trainers apply bf16 autocast themselves."""
    return Accelerator(cpu=no_cuda())


def shutdown(finished: bool = True) -> None:
    """End this process's part of a launched job: wait for every rank, then tear the process group down.

    Left to interpreter exit, the teardown races: rank 0 hosts the rendezvous store, and when it exits
    first a peer still closing its gloo connections can abort ("terminate called without an active
    exception", SIGABRT) and fail a job whose work had finished. After an error (``finished=False``) the
    other ranks may be inside some other collective, so there is no barrier to meet: only the local
    teardown. A no-op outside a launch."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        if finished:
            dist.barrier()
        dist.destroy_process_group()


def shard(items: Sequence[T], rank: int, world: int) -> list[T]:
    """This rank's share of ``items``: every ``world``-th one from ``rank`` (disjoint, together complete)."""
    if not 0 <= rank < world:
        raise ValueError(f"rank {rank} outside a world of {world}")
    return list(items[rank::world])


def shard_path(path: str, rank: int, world: int) -> str:
    """Where rank ``rank`` of ``world`` writes its part of ``path`` (a JSONL)."""
    return f"{path}.rank{rank}-of-{world}"


def parameter_checksum(model: torch.nn.Module) -> torch.Tensor:
    """One float64 number per model that differs when any parameter differs (sum of |w| * position weight)."""
    total = torch.zeros((), dtype=torch.float64)
    for i, p in enumerate(model.parameters()):
        total += (p.detach().double().abs().sum() + p.detach().double().sum()).cpu() * (1 + i % 7)
    return total


def check_replicas_agree(accel, model: torch.nn.Module) -> float | None:
    """After training under several processes: every rank must hold the same weights (DDP keeps them equal;
    a drift means gradients were not all-reduced). Raises on a mismatch; returns the checksum, or None
    where there is nothing to compare (one process; FSDP/DeepSpeed, whose ranks hold different shards)."""
    kind = str(accel.distributed_type).upper()
    if accel.num_processes == 1 or "FSDP" in kind or "DEEPSPEED" in kind:
        return None
    mine = parameter_checksum(model).to(accel.device)
    every = accel.gather(mine.reshape(1)).cpu()
    if not torch.allclose(every, every[0].expand_as(every), rtol=1e-9, atol=0.0):
        raise FastForwardError(
            f"the {len(every)} training processes ended with different weights (checksums "
            f"{[round(float(x), 6) for x in every]}): gradients were not synchronised"
        )
    return float(every[0])

"""Data-parallel training with ``torch.distributed``: ``torchrun --nproc_per_node=N -m mma_nmt train ...`` sets
RANK/WORLD_SIZE/LOCAL_RANK; gloo on CPU, NCCL on CUDA."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def init_distributed(device: torch.device) -> DistInfo:
    """Joins the process group when launched by torchrun (WORLD_SIZE > 1); a no-op otherwise."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistInfo()
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return DistInfo(rank=dist.get_rank(), world_size=dist.get_world_size(),
                    local_rank=int(os.environ.get("LOCAL_RANK", "0")))


def all_reduce_sum(values: torch.Tensor, info: DistInfo) -> torch.Tensor:
    """Sum of ``values`` over processes (returned as a new tensor; unchanged without distribution)."""
    values = values.clone()
    if info.enabled:
        dist.all_reduce(values, op=dist.ReduceOp.SUM)
    return values


def all_gather_objects(obj, info: DistInfo) -> list:
    if not info.enabled:
        return [obj]
    out = [None] * info.world_size
    dist.all_gather_object(out, obj)
    return out


def barrier(info: DistInfo) -> None:
    if info.enabled:
        dist.barrier()


def leave_process_group(info: DistInfo) -> None:
    """Ends this process's part in the default process group when a command is done, as PyTorch's shutdown guide
    asks: NCCL otherwise warns at exit on the first rank of every node ("destroy_process_group() was not called
    before program exit, which can leak resources"). A gloo group (CPU) is left to the interpreter's exit: destroying
    a gloo context right after the training's last barrier races with the peer's own teardown (pytorch/gloo#155,
    open), which aborted a rank of this project's two-process test in CI."""
    if not info.enabled or not dist.is_initialized():
        return
    if dist.get_backend() == "nccl":
        dist.destroy_process_group()

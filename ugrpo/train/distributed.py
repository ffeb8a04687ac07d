"""Multi-process helpers: one process group, prompt sharding, gradient and metric reduction.

Works under ``torchrun`` and ``accelerate launch`` alike: both set ``RANK``, ``WORLD_SIZE``,
``MASTER_ADDR`` and ``MASTER_PORT``, and :func:`init_distributed` joins the group they
describe (gloo on CPU, nccl on GPU). Without those variables everything is a no-op on one
process.

The trainer shards the B prompts of a step across processes (each gets a contiguous share;
the global batch and every sample's seed are those of a 1-process run), normalises the loss
by the *global* count, and sums gradients with ``all_reduce``: the summed gradient is the
gradient of the global loss, so parameters follow the 1-process run up to float rounding.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

__all__ = ["DistContext", "init_distributed", "shard", "all_reduce_grads", "reduce_sum", "gather_objects", "barrier"]


@dataclass(frozen=True)
class DistContext:
    """Where this process stands: ``rank`` of ``world_size``; ``is_main`` writes files."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def init_distributed() -> DistContext:
    """Join the process group described by the launcher's environment variables, if any."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistContext()
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    if not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(local_rank)
        dist.init_process_group(backend=backend)
    return DistContext(rank=rank, world_size=world, local_rank=local_rank)


def shard(n: int, ctx: DistContext) -> range:
    """The contiguous share of ``range(n)`` of this process (sizes differ by at most one)."""
    base, extra = divmod(n, ctx.world_size)
    start = ctx.rank * base + min(ctx.rank, extra)
    return range(start, start + base + (1 if ctx.rank < extra else 0))


def all_reduce_grads(params: Sequence[torch.nn.Parameter], ctx: DistContext) -> None:
    """Sum the gradients of ``params`` over processes (a process without data contributes zeros)."""
    if not ctx.enabled:
        return
    grads = []
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        grads.append(p.grad)
    flat = torch.cat([g.reshape(-1) for g in grads])  # one collective instead of one per tensor
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    offset = 0
    for g in grads:
        n = g.numel()
        g.copy_(flat[offset:offset + n].view_as(g))
        offset += n


def reduce_sum(values: Sequence[float], ctx: DistContext, device: torch.device | str = "cpu") -> list[float]:
    """Elementwise sum of a list of floats over processes (float64)."""
    t = torch.tensor(list(values), dtype=torch.float64, device=device)
    if ctx.enabled:
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.tolist()


def gather_objects(obj: Any, ctx: DistContext) -> list[Any]:
    """Every process's ``obj``, in rank order (``[obj]`` on one process)."""
    if not ctx.enabled:
        return [obj]
    out: list[Any] = [None] * ctx.world_size
    dist.all_gather_object(out, obj)
    return out


def broadcast_params(module: torch.nn.Module, ctx: DistContext) -> None:
    """Copy rank 0's parameters to every process (guards against differing initialisations)."""
    if not ctx.enabled:
        return
    with torch.no_grad():
        for p in module.parameters():
            dist.broadcast(p.data, src=0)


def barrier(ctx: DistContext) -> None:
    if ctx.enabled:
        dist.barrier()


def destroy(ctx: DistContext) -> None:
    if ctx.enabled and dist.is_initialized():
        dist.destroy_process_group()

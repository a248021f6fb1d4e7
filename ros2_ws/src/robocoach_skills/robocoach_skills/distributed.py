"""Data-parallel training through torch.distributed, set up from torchrun's environment.

Every trainer (world model, judge, experts) runs the same script on one CPU, one GPU, or many
GPUs / machines: `torchrun --nproc_per_node=4 -m robocoach_world.world.train ...` sets RANK,
WORLD_SIZE and LOCAL_RANK, and `setup_distributed()` turns them into a process group; without them
it is a single process and `wrap`/`sampler` are no-ops. The device comes from `select_device`, the
one place that chooses it.

    ctx = setup_distributed()
    model = ctx.wrap(model.to(ctx.device))
    loader = ctx.train_loader(dataset, batch_size=64, seed=0)
    ...
    if ctx.is_main:
        save_checkpoint(...)
    ctx.close()
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from robocoach_skills.device import select_device


@dataclass(frozen=True)
class DistributedContext:
    rank: int  # global rank of this process
    world_size: int  # processes in the job
    device: torch.device

    @property
    def is_main(self) -> bool:
        """Rank 0 logs, draws progress bars and writes checkpoints."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def wrap(self, model: nn.Module) -> nn.Module:
        """DistributedDataParallel over `model` in a multi-process job; `model` itself otherwise."""
        if not self.distributed:
            return model
        device_ids = [self.device.index] if self.device.type == "cuda" else None
        return nn.parallel.DistributedDataParallel(model, device_ids=device_ids)

    def sampler(self, dataset: Dataset, shuffle: bool, seed: int = 0) -> DistributedSampler | None:
        """A sampler giving each rank its shard; None (use the loader's own shuffle) for one process."""
        if not self.distributed:
            return None
        return DistributedSampler(dataset, self.world_size, self.rank, shuffle=shuffle, seed=seed)

    def train_loader(self, dataset: Dataset, batch_size: int, seed: int, **kwargs) -> DataLoader:
        """A shuffling DataLoader over this rank's shard (seeded); `kwargs` go to DataLoader.

        Under DDP call `set_epoch(epoch)` on `loader.sampler` (a DistributedSampler) every epoch.
        """
        sampler = self.sampler(dataset, shuffle=True, seed=seed)
        generator = torch.Generator().manual_seed(seed)
        return DataLoader(
            dataset,
            batch_size=batch_size,
            shuffle=sampler is None,
            sampler=sampler,
            generator=generator,
            **kwargs,
        )

    def mean(self, value: float) -> float:
        """`value` averaged over all ranks (for logging metrics that each rank computed on its shard)."""
        if not self.distributed:
            return value
        tensor = torch.tensor([value], dtype=torch.float64, device=self.device)
        dist.all_reduce(tensor)
        return tensor.item() / self.world_size

    def close(self) -> None:
        """Leave the process group once every rank is here. Without the barrier a rank that finished
        training destroyed its group while rank 0 was still writing the checkpoint, and gloo aborted
        it (SIGABRT, "terminate called without an active exception"; seen once in CI, 2026-12-05)."""
        if self.distributed and dist.is_initialized():
            dist.barrier()
            dist.destroy_process_group()


def setup_distributed(preferred_device: str | None = None) -> DistributedContext:
    """A context for this process: a process group when launched by torchrun, a single process otherwise."""
    world_size = int(os.environ.get("WORLD_SIZE", 1))
    rank = int(os.environ.get("RANK", 0))
    device = select_device(preferred_device)
    if world_size > 1 and not dist.is_initialized():
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return DistributedContext(rank=rank, world_size=world_size, device=device)


def unwrap(model: nn.Module) -> nn.Module:
    """The module inside a DDP wrapper (for state_dict / checkpoints), or `model` itself."""
    return model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model

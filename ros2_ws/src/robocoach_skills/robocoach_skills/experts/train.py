"""Training the experts: pretraining on the bootstrap demos, then per-skill adapter updates.

    metrics, losses = pretrain(lib, loader, steps=2000)                 # backbone + every skill
    metrics, losses = update_adapter(lib, "pick", loader, steps=300)    # pick's adapter + head only
    metrics, losses = update_adapter(lib, "pick", loader, 300, dense_steps=3000)  # ... then on fixed vision
    save_loss_curve(losses, "pick_v0001.png")

Batches follow the dataset contract (model.py KEY_*). With a `skill` key, pretraining groups each
batch's rows by skill (one loss per group, weighted by rows) and an update keeps only its skill's
rows; without one, every row belongs to the updated skill (or the library's only skill).

An update trains exactly `library.adapter_parameters(skill)` (plus the backbone when
config.freeze_backbone is False): everything else has requires_grad=False and is not in the
optimiser, so it stays bit-identical. The library has no BatchNorm or dropout, so train and eval
mode compute the same function and no running statistics drift.

Most of an update's cost is the convolutions (forward and backward through the skill's conv LoRA),
and 300 steps of 64 leave a skill underfitted: a 50-demo Franka push update reached a loss of 0.38
and pushed 0 of 16 trials, 3000 such steps reached 0.19 and pushed 10 of 16 (docs/bootstrap.md,
session 39), at ten times the cost. So an update may go on for `dense_steps` with the skill's vision
fixed where the first steps left it: every frame's keypoints and pooled features are computed once
(KEY_VISION), and only the dense layers' LoRA and the head train on them, in bigger, cheap batches.

Multi-GPU (not implemented; one process keeps this file short): under `torchrun --nproc_per_node N`
call torch.distributed.init_process_group("nccl") when WORLD_SIZE > 1 (select_device already picks
the LOCAL_RANK GPU), give the DataLoader a DistributedSampler, wrap
`DistributedDataParallel(library, device_ids=[device], find_unused_parameters=True)` (a batch
touches only its skills' adapters) and call it like the library, `ddp(batch, skill)`, since forward
returns the loss. DDP wants one forward per backward, so feed one skill per batch (a skill-grouped
sampler) rather than mixed batches, and publish artifacts from rank 0 only.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from statistics import fmean
from typing import Any

import torch
from matplotlib.figure import Figure
from torch import nn
from tqdm import tqdm

from robocoach_skills.constants import KEY_SUBTASK_START, KEY_SUBTASK_START_KEYPOINTS, KEY_VISION, OBS_IMAGE
from robocoach_skills.device import select_device
from robocoach_skills.experts.model import KEY_ROBOT_ID, KEY_SKILL, Batch, ChunkPolicy, split_by_skill

FINAL_WINDOW = 0.1  # "last" metrics average the final 10% of steps
CURVE_SMOOTHING = 0.05  # moving-average window of the loss curve, as a fraction of the steps


def pretrain(
    library: ChunkPolicy,
    batches: Iterable[Batch],
    steps: int,
    device: str | None = None,
    progress: bool = True,
    frozen: Iterable[nn.Parameter] = (),
) -> tuple[dict[str, float], list[float]]:
    """Train every parameter (backbone and all skills in the batches) but `frozen` for `steps` steps."""
    skip = {id(p) for p in frozen}
    params = [p for p in library.parameters() if id(p) not in skip]
    return _train(library, params, batches, steps, None, "pretrain", device, progress)


def update_adapter(
    library: ChunkPolicy,
    skill: str,
    batches: Iterable[Batch],
    steps: int,
    device: str | None = None,
    progress: bool = True,
    dense_steps: int = 0,
    dense_batch_size: int = 256,
    seed: int = 0,
) -> tuple[dict[str, float], list[float]]:
    """Train only `skill`'s adapter and head (see module docstring) for `steps` steps, then for
    `dense_steps` steps of `dense_batch_size` rows on the vision those steps left, computed once over one
    pass of `batches` (`seed`: which rows each dense step draws). Losses of both parts, in order."""
    params = library.adapter_parameters(skill)
    if not library.config.freeze_backbone:
        params += library.backbone_parameters()
    unique = list({id(p): p for p in params}.values())
    metrics, losses = _train(library, unique, batches, steps, skill, f"update {skill}", device, progress)
    if dense_steps < 1:
        return metrics, losses
    rows = _fixed_vision(library, skill, batches)
    fixed = {id(p) for p in library.vision_parameters_of(skill)}
    dense = [p for p in unique if id(p) not in fixed]
    draws = _draws(rows, dense_batch_size, seed)
    desc = f"update {skill} (fixed vision)"
    more_metrics, more = _train(library, dense, draws, dense_steps, skill, desc, device, progress)
    return {
        **metrics,
        **{k.replace("train/", "train_dense/"): v for k, v in more_metrics.items()},
    }, losses + more


@torch.no_grad()
def _fixed_vision(library: ChunkPolicy, skill: str, batches: Iterable[Batch]) -> dict[str, torch.Tensor]:
    """Every row of `skill` in one pass over `batches`, frames replaced by what the skill's vision makes of
    them now (KEY_VISION, and KEY_SUBTASK_START_KEYPOINTS for the subtask's first frame)."""
    if library.config.shift_pixels:
        raise ValueError(
            "dense steps compute each frame's vision once; they need ExpertConfig.shift_pixels = 0"
        )
    backbone, adapter = library.vision_of(skill)
    was_training = library.training
    library.eval()
    parts: dict[str, list[torch.Tensor]] = {}
    for batch in batches:
        for group in _groups(batch, library, skill).values():
            group = {k: v.to(library.device) for k, v in group.items() if isinstance(v, torch.Tensor)}
            group[KEY_VISION] = torch.cat(backbone.vision(group.pop(OBS_IMAGE), adapter), dim=1)
            if KEY_SUBTASK_START in group:
                group[KEY_SUBTASK_START_KEYPOINTS] = backbone.vision(group.pop(KEY_SUBTASK_START), adapter)[0]
            for k, v in group.items():
                parts.setdefault(k, []).append(v)
    library.train(was_training)
    if not parts:
        raise ValueError(f"the batches hold no rows of skill {skill!r} for the dense steps")
    return {k: torch.cat(v) for k, v in parts.items()}


def _draws(rows: dict[str, torch.Tensor], batch_size: int, seed: int) -> Iterator[dict[str, torch.Tensor]]:
    """Endless batches of `batch_size` rows drawn uniformly (with replacement) from `rows`."""
    n = len(next(iter(rows.values())))
    generator = torch.Generator().manual_seed(seed)
    while True:
        pick = torch.randint(n, (batch_size,), generator=generator)
        yield {k: v[pick.to(v.device)] for k, v in rows.items()}


def save_loss_curve(losses: list[float], path: Path | str) -> Path:
    """Per-step loss and its moving average, log scale, as a PNG (no display needed)."""
    window = max(1, int(len(losses) * CURVE_SMOOTHING))
    smooth = torch.tensor(losses).unfold(0, window, 1).mean(dim=1).tolist() if len(losses) >= window else []
    fig = Figure(figsize=(6, 4))
    ax = fig.add_subplot()
    ax.plot(losses, alpha=0.35, label="loss")
    ax.plot(range(window - 1, window - 1 + len(smooth)), smooth, label=f"mean of {window}")
    if losses and min(losses) > 0:
        ax.set_yscale("log")
    ax.set(xlabel="step", ylabel="loss")
    ax.legend()
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    return path


def _train(
    library: ChunkPolicy,
    params: list[nn.Parameter],
    batches: Iterable[Batch],
    steps: int,
    only_skill: str | None,
    desc: str,
    device: str | None,
    progress: bool,
) -> tuple[dict[str, float], list[float]]:
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps!r}")
    cfg = library.config
    library.to(select_device(device))
    optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    losses: list[float] = []
    parts: list[dict[str, float]] = []
    samples, start = 0, time.perf_counter()
    groups_iter = _cycle(batches, library, only_skill)
    with _trainable_only(library, params):
        library.train()
        bar = tqdm(range(steps), desc=desc, disable=not progress, leave=False)
        for _ in bar:
            groups = next(groups_iter)
            rows = {skill: len(group[KEY_ROBOT_ID]) for skill, group in groups.items()}
            total = sum(rows.values())
            loss = torch.zeros((), device=library.device)
            step_parts: dict[str, float] = {}
            for skill, group in groups.items():
                group_loss, group_parts = library(group, skill)
                loss = loss + group_loss * (rows[skill] / total)
                for k, v in group_parts.items():
                    step_parts[k] = step_parts.get(k, 0.0) + v * rows[skill] / total
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if cfg.grad_clip > 0:
                nn.utils.clip_grad_norm_(params, cfg.grad_clip)
            optimizer.step()
            losses.append(loss.item())
            parts.append(step_parts)
            samples += total
            bar.set_postfix(loss=f"{losses[-1]:.4f}", refresh=False)
    last = parts[-max(1, int(steps * FINAL_WINDOW)) :]
    metrics = {
        "train/steps": float(steps),
        "train/samples": float(samples),
        "train/seconds": time.perf_counter() - start,
        "train/trained_params": float(sum(p.numel() for p in params)),
        "train/loss_first": losses[0],
        **{f"train/{k}_last": fmean(p[k] for p in last) for k in last[0]},
    }
    return metrics, losses


def _cycle(
    batches: Iterable[Batch], library: ChunkPolicy, only_skill: str | None
) -> Iterator[dict[str, Any]]:
    """Endless {skill: rows} groups from re-iterating `batches` (e.g. a DataLoader); forward moves them."""
    while True:
        yielded = False
        for batch in batches:
            groups = _groups(batch, library, only_skill)
            if groups:
                yielded = True
                yield groups
        if not yielded:
            raise ValueError(
                f"the batches yielded nothing to train on{f' for skill {only_skill!r}' if only_skill else ''}"
                " (empty, an exhausted iterator, or no rows of that skill)"
            )


def _groups(batch: Batch, library: ChunkPolicy, only_skill: str | None) -> dict[str, Batch]:
    if KEY_SKILL not in batch:
        if only_skill is None and len(library.skills) != 1:
            raise ValueError(f"batches need a {KEY_SKILL!r} key to pretrain skills {list(library.skills)}")
        return {only_skill or library.skills[0]: batch}
    groups = split_by_skill(batch, library.skills)
    if only_skill is None:
        return groups
    return {only_skill: groups[only_skill]} if only_skill in groups else {}


@contextmanager
def _trainable_only(module: nn.Module, params: list[nn.Parameter]) -> Iterator[None]:
    """requires_grad=True on `params` only, for the duration; the previous flags come back after."""
    before = {id(p): p.requires_grad for p in module.parameters()}
    chosen = {id(p) for p in params}
    for p in module.parameters():
        p.requires_grad_(id(p) in chosen)
    try:
        yield
    finally:
        for p in module.parameters():
            p.requires_grad_(before[id(p)])

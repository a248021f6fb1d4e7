"""Train CoachWorld on episode stores (demos and rollouts, failures included), both arms at once.

    python -m robocoach_world.world.train --stores runs/world_data/demos runs/world_data/rollouts \\
        --out runs/world --steps 1500
    torchrun --nproc_per_node=4 -m robocoach_world.world.train --stores ... --out runs/world

Windows (real history, K future actions, K future frames/proprio) are cut from every episode
not held out (`data.is_held_out`); the loss rolls the latent dynamics K steps from the history
without re-reading real frames, with noise on the history frames and latents (see
`model.LossConfig`). Writes `<out>/checkpoint` (see `artifacts`), `<out>/metrics.json` and
`<out>/curves.png`; the device comes from `setup_distributed` (CPU, GPU, or DDP under torchrun).
"""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
import tyro
from torch.utils.data import DataLoader
from tqdm import tqdm

from robocoach_skills.checkpoint import jsonable
from robocoach_skills.distributed import DistributedContext, setup_distributed, unwrap
from robocoach_world.world.artifacts import CHECKPOINT_DIR, save_world
from robocoach_world.world.data import WindowDataset, WindowSpec, select_episodes
from robocoach_world.world.evaluate import full_windows, open_loop_scores
from robocoach_world.world.model import CoachWorld, LossConfig, WorldConfig


@dataclass
class TrainConfig:
    """Train CoachWorld; everything not given has a default sized for one CPU thread."""

    stores: tuple[Path, ...]  # episode stores to train on (demos and rollouts)
    out: Path = Path("runs/world")  # run directory; <out>/checkpoint must not exist yet
    steps: int = 1500  # optimiser steps
    batch_size: int = 16  # windows per step and process
    lr: float = 1e-3  # peak AdamW learning rate (linear warm-up, cosine decay to 10%)
    warmup: int = 100  # warm-up steps
    grad_clip: float = 1.0  # max global gradient norm
    time_limit_min: float | None = None  # stop early after this many minutes (the schedule is by steps)
    held_out_fraction: float = 0.15  # episodes kept out of training, for evaluation
    eval_every: int = 250  # steps between held-out scores (main process)
    eval_windows: int = 64  # held-out windows scored each time
    seed: int = 0  # seeds python, numpy, torch and the data order
    threads: int = 1  # torch CPU threads per process
    num_workers: int = 0  # DataLoader workers (windows are in memory; 0 is fine on a CPU)
    device: str | None = None  # None: select_device() (CUDA when present, else CPU)
    window: WindowSpec = field(default_factory=WindowSpec)  # history and horizon of a window
    world: WorldConfig = field(default_factory=WorldConfig)  # model size
    loss: LossConfig = field(default_factory=LossConfig)  # objective and robustness noise

    def __post_init__(self) -> None:
        if not self.stores:
            raise ValueError("TrainConfig.stores: give at least one episode store")
        for name in ("steps", "batch_size", "eval_every", "eval_windows", "threads"):
            if getattr(self, name) < 1:
                raise ValueError(f"TrainConfig.{name} must be >= 1, got {getattr(self, name)!r}")
        if not 0 <= self.held_out_fraction < 1:
            raise ValueError(
                f"TrainConfig.held_out_fraction must be in [0, 1), got {self.held_out_fraction!r}"
            )


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _schedule(config: TrainConfig):
    def factor(step: int) -> float:
        if step < config.warmup:
            return (step + 1) / config.warmup
        progress = (step - config.warmup) / max(1, config.steps - config.warmup)
        return 0.1 + 0.45 * (1 + math.cos(math.pi * min(progress, 1.0)))

    return factor


def _batches(loader: DataLoader, device: torch.device):
    """Endless batches on `device`, reshuffled every epoch (DistributedSampler included)."""
    epoch = 0
    while True:
        if hasattr(loader.sampler, "set_epoch"):
            loader.sampler.set_epoch(epoch)
        for batch in loader:
            yield {k: v.to(device, non_blocking=True) for k, v in batch.items()}
        epoch += 1


def _held_out_scores(model: CoachWorld, windows, config: TrainConfig) -> dict[str, float]:
    """Mean PSNR over the horizon (model vs copy-last) and at its last step, on held-out windows."""
    model.eval()
    scores = open_loop_scores(model, windows, batch_size=32, seed=config.seed)
    model.train()
    return {
        "val_psnr_model": float(np.mean(scores["psnr_model"])),
        "val_psnr_copy_last": float(np.mean(scores["psnr_copy_last"])),
        "val_psnr_model_last_h": scores["psnr_model"][-1],
        "val_psnr_copy_last_last_h": scores["psnr_copy_last"][-1],
    }


def train(config: TrainConfig) -> dict:
    """Run the training described by `config`; returns the final metrics (main process)."""
    seed_everything(config.seed)
    torch.set_num_threads(config.threads)
    ctx = setup_distributed(config.device)
    checkpoint_dir = config.out / CHECKPOINT_DIR
    if checkpoint_dir.exists():
        raise FileExistsError(f"{checkpoint_dir} exists; checkpoints are immutable, choose another --out")
    stores = list(config.stores)
    train_set = WindowDataset(
        select_episodes(stores, config.held_out_fraction, held_out=False), config.window
    )
    val_set = WindowDataset(select_episodes(stores, config.held_out_fraction, held_out=True), config.window)
    if len(train_set) == 0:
        raise ValueError(f"no training windows in {stores}")
    model = CoachWorld(config.world).to(ctx.device)
    ddp = ctx.wrap(model)
    loader = ctx.train_loader(
        train_set,
        config.batch_size,
        config.seed,
        drop_last=len(train_set) >= config.batch_size * ctx.world_size,
        num_workers=config.num_workers,
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=1e-4)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _schedule(config))
    val_windows = full_windows(val_set, stride=1) if len(val_set) else None
    if val_windows is not None and len(val_windows) > config.eval_windows:
        picks = np.linspace(0, len(val_windows) - 1, config.eval_windows).round().astype(int)
        val_windows.indices = [val_windows.indices[i] for i in picks]
    curves: list[dict[str, float]] = []
    start = time.monotonic()
    bar = tqdm(total=config.steps, desc="coachworld", disable=not ctx.is_main)
    batches = _batches(loader, ctx.device)
    step = 0
    while step < config.steps:
        loss, parts = ddp(next(batches), config.loss)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimizer.step()
        scheduler.step()
        step += 1
        row = {"step": step, **{k: ctx.mean(v) for k, v in parts.items()}}
        out_of_time = (
            config.time_limit_min is not None and time.monotonic() - start > 60 * config.time_limit_min
        )
        if (
            ctx.is_main
            and val_windows
            and (step % config.eval_every == 0 or step == config.steps or out_of_time)
        ):
            row |= _held_out_scores(model, val_windows, config)
        curves.append(row)
        bar.update()
        bar.set_postfix(loss=f"{row['loss']:.4f}", kl=f"{row['kl']:.2f}")
        if _stop_all(ctx, out_of_time):
            break
    bar.close()
    metrics = _summary(curves, step, time.monotonic() - start, len(train_set), len(val_set))
    if ctx.is_main:
        meta = {
            "train": jsonable(asdict(config)),
            "held_out_fraction": config.held_out_fraction,
            "step": step,
            "metrics": metrics,
        }
        save_world(checkpoint_dir, unwrap(ddp), meta)
        (config.out / "metrics.json").write_text(json.dumps({"metrics": metrics, "curves": curves}, indent=2))
        plot_curves(curves, config.out / "curves.png")
        print(json.dumps(metrics, indent=2))
    # DDP's reducer holds the process group: release it first, so the group is torn down inside close()
    # and not later, at the interpreter's exit (the judge's trainer returns its wrapper before closing).
    del ddp
    ctx.close()
    return metrics


def _stop_all(ctx: DistributedContext, out_of_time: bool) -> bool:
    """Every rank stops together (one rank's clock decides would hang the others' all-reduce)."""
    return ctx.mean(float(out_of_time)) > 0


LOSS_PARTS = ("loss", "image_mse", "joint_mse", "gripper_mse", "kl")  # CoachWorld.forward's parts, logged


def _summary(curves: list[dict], steps: int, seconds: float, n_train: int, n_val: int) -> dict:
    tail = curves[-min(50, len(curves)) :]
    metrics = {k: float(np.mean([r[k] for r in tail])) for k in LOSS_PARTS}
    evals = [r for r in curves if "val_psnr_model" in r]
    if evals:
        metrics |= {k: v for k, v in evals[-1].items() if k.startswith("val_")}
    return metrics | {
        "steps": steps,
        "seconds": round(seconds, 1),
        "train_windows": n_train,
        "val_windows": n_val,
    }


def plot_curves(curves: list[dict], path: Path) -> None:
    """Training losses (smoothed) and held-out PSNR vs step, as one PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = np.array([r["step"] for r in curves])
    parts = LOSS_PARTS[1:]
    fig, axes = plt.subplots(1, len(parts) + 1, figsize=(4 * len(parts) + 4, 3.2))
    for ax, key in zip(axes, parts, strict=False):
        values = np.array([r[key] for r in curves])
        width = max(1, len(values) // 50)
        smooth = np.convolve(values, np.ones(width) / width, mode="valid")
        ax.plot(steps, values, alpha=0.3)
        ax.plot(steps[width - 1 :], smooth)
        ax.set_title(key)
        ax.set_xlabel("step")
        ax.set_yscale("log")
    evals = [r for r in curves if "val_psnr_model" in r]
    if evals:
        x = [r["step"] for r in evals]
        axes[-1].plot(x, [r["val_psnr_model"] for r in evals], "o-", label="model (mean over h)")
        axes[-1].plot(x, [r["val_psnr_copy_last"] for r in evals], "--", label="copy last frame")
        axes[-1].legend(fontsize=7)
    axes[-1].set_title("held-out PSNR [dB]")
    axes[-1].set_xlabel("step")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)


if __name__ == "__main__":
    train(tyro.cli(TrainConfig))

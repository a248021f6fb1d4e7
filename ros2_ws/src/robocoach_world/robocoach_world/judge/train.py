"""Train the progress judge on episode stores (ground-truth progress labels), on CPU, GPU or many GPUs.

    python -m robocoach_world.judge.train --stores runs/corpus --out runs/judge
    torchrun --nproc_per_node=4 -m robocoach_world.judge.train --stores runs/corpus --out runs/judge

Every k-th episode (`val_every`) is held out for the validation curve. Loss: binary cross-entropy
of the judged progress against the soft ground-truth progress, plus that of the done score against
"progress reached 1", averaged over real frames. With `--prior`, the frame encoder first learns
where the landmarks (cubes, buttons, bin, pad, drawer handle, gripper) are and which lamps are lit,
on robot-free renders of each arm's workspace: the experts' perception prior (`experts.perception`),
so that a few hundred episodes teach progress, not vision (measured in docs/benchmarks.md). With
`--world <CoachWorld checkpoint>`, every training episode is also seen as that world model imagines
it (`world.evaluate.imagined_twin`: its own actions replayed open loop from its first frame, under
the simulator's labels of what they did), so the judge learns to read the video it diagnoses in
imagination; validation stays real. Writes `<out>/checkpoint` (see judge.checkpoint),
`<out>/metrics.json` and `<out>/curves.png`.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import matplotlib
import numpy as np
import torch
import tyro
from torch.nn import functional
from torch.utils.data import DataLoader, DistributedSampler
from tqdm import tqdm

from robocoach_skills import measures
from robocoach_skills.checkpoint import jsonable
from robocoach_skills.data.episode import Episode
from robocoach_skills.distributed import DistributedContext, setup_distributed, unwrap
from robocoach_skills.experts.perception import (
    PerceptionConfig,
    ProbeReadout,
    render_landmark_frames,
    train_landmark_probe,
)
from robocoach_world.judge.checkpoint import save_judge
from robocoach_world.judge.data import (
    KEY_COND,
    KEY_FRAMES,
    KEY_MASK,
    KEY_PROGRESS_KNOWN,
    KEY_PROPRIO,
    KEY_TARGET,
    SegmentConfig,
    SegmentDataset,
    collate_segments,
    load_episodes,
)
from robocoach_world.judge.model import DONE, PROGRESS, JudgeConfig, ProgressJudge
from robocoach_world.judge.verdict import VerdictConfig
from robocoach_world.world.evaluate import imagined_twins

matplotlib.use("Agg")


@dataclass
class TrainConfig:
    """Judge training run."""

    stores: list[Path]  # episode stores to train on (e.g. runs/corpus)
    out: Path = Path("runs/judge")  # judge directory to write (must not hold a checkpoint yet)
    epochs: int = 6  # passes over the training segments
    batch_segments: int = 8  # segments per batch (per process under torchrun)
    lr: float = 2e-3  # AdamW peak learning rate (cosine decay to 5% of it)
    weight_decay: float = 1e-4
    done_weight: float = 1.0  # weight of the done head's loss next to the progress loss
    done_pos_weight: float = 1.0  # weight of done frames in the done loss (5 was worse on calibration)
    val_every: int = 10  # every k-th episode (in store order) is validation, never trained on
    seed: int = 0  # weights, data order and augmentation
    threads: int = 1  # torch CPU threads (this machine is shared)
    device: str | None = None  # overrides select_device (e.g. "cpu")
    show_progress: bool = True
    judge: JudgeConfig = field(default_factory=JudgeConfig)
    segments: SegmentConfig = field(default_factory=SegmentConfig)
    verdict: VerdictConfig = field(default_factory=VerdictConfig)  # done rule saved with the judge
    prior: bool = False  # learn the frame encoder's landmark prior first (see the module docstring)
    perception: PerceptionConfig = field(default_factory=PerceptionConfig)  # that prior's renders and steps
    freeze_encoder: bool = False  # with the prior: train only what reads the encoder's features
    world: Path | None = None  # CoachWorld checkpoint: also train on its imagined twins (module docstring)

    def __post_init__(self) -> None:
        if self.epochs < 1 or self.batch_segments < 1 or self.val_every < 2:
            raise ValueError(
                f"need epochs >= 1, batch_segments >= 1, val_every >= 2; got {self.epochs}, "
                f"{self.batch_segments}, {self.val_every}"
            )


def split_episodes(episodes: list[Episode], val_every: int) -> tuple[list[Episode], list[Episode]]:
    """(train, validation): every `val_every`-th episode goes to validation."""
    val = [e for k, e in enumerate(episodes) if k % val_every == val_every - 1]
    train = [e for k, e in enumerate(episodes) if k % val_every != val_every - 1]
    return train, val


def masked_loss(
    logits: torch.Tensor,
    target: torch.Tensor,
    mask: torch.Tensor,
    progress_known: torch.Tensor,
    config: TrainConfig,
) -> torch.Tensor:
    """BCE of the progress channel against soft progress targets plus `done_weight` x BCE of the
    done channel against progress == 1 (positives weighted `done_pos_weight`), mean over real frames.
    logits (B, T, 2), target/mask (B, T); progress_known (B,) bool: rows whose progress is scored (a
    counterfactual row trains the done channel only)."""
    bce = functional.binary_cross_entropy_with_logits
    progress = bce(logits[..., PROGRESS], target, reduction="none") * progress_known[:, None]
    pos_weight = torch.tensor(config.done_pos_weight, device=logits.device)
    done = bce(logits[..., DONE], (target >= 1.0).float(), reduction="none", pos_weight=pos_weight)
    return ((progress + config.done_weight * done) * mask).sum() / mask.sum().clamp(min=1)


@torch.no_grad()
def validate(
    judge: ProgressJudge, loader: DataLoader, device: torch.device, config: TrainConfig
) -> dict[str, float]:
    """Loss, mean absolute progress error and Spearman rho over validation frames."""
    judge.eval()
    predicted, actual, losses = [], [], []
    for batch in loader:
        frames, target, mask = (
            batch[KEY_FRAMES].to(device),
            batch[KEY_TARGET].to(device),
            batch[KEY_MASK].to(device),
        )
        logits, _ = judge(frames, batch[KEY_COND].to(device), mask, batch[KEY_PROPRIO].to(device))
        known = batch[KEY_PROGRESS_KNOWN].to(device)
        losses.append(masked_loss(logits, target, mask, known, config).item())
        predicted.append(torch.sigmoid(logits[..., PROGRESS])[mask].cpu().numpy())
        actual.append(target[mask].cpu().numpy())
    judge.train()
    p, a = np.concatenate(predicted), np.concatenate(actual)
    return {
        "val_loss": float(np.mean(losses)),
        "val_mae": float(np.mean(np.abs(p - a))),
        "val_spearman": measures.spearman(p, a),
    }


def pretrain_encoder(
    judge: ProgressJudge, robots: list[str], config: PerceptionConfig, progress: bool = True
) -> dict[str, float]:
    """Teach the judge's frame encoder the landmarks' image positions and the lamps' states through a
    linear probe on its features (discarded afterwards); returns metrics."""
    size = judge.config.image_size
    renders = [render_landmark_frames(robot, config, size, progress) for robot in robots]
    device = next(judge.parameters()).device
    landmarks, n_lamps = renders[0].pixels.shape[1], renders[0].lamps.shape[1]
    probe = torch.nn.Linear(judge.config.feature_dim, 2 * landmarks + n_lamps).to(device)

    def read(images: torch.Tensor) -> ProbeReadout:
        out = probe(judge.encoder(images))  # (B, 2K + lamps): all x, all y, lamp logits
        return ProbeReadout(out[:, : 2 * landmarks], out[:, 2 * landmarks :])

    # Targets in [-1, 1] across the frame, as the experts' keypoints (one "cell" per pixel).
    metrics, _ = train_landmark_probe(
        read,
        [*judge.encoder.parameters(), *probe.parameters()],
        renders,
        size,
        config,
        device,
        desc="judge perception prior",
        progress=progress,
    )
    return {f"perception/{key}": value for key, value in metrics.items()}


def plot_curves(history: dict[str, list[float]], path: Path) -> None:
    """Training loss per step and validation metrics per epoch, one PNG."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.5))
    axes[0].plot(history["train_loss"], lw=0.8)
    axes[0].set(title="train loss (BCE)", xlabel="step")
    epochs = np.arange(1, len(history["val_loss"]) + 1)
    axes[1].plot(epochs, history["val_loss"], "o-", label="val loss")
    axes[1].plot(epochs, history["val_mae"], "s-", label="val MAE")
    axes[1].set(title="validation error", xlabel="epoch")
    axes[1].legend()
    axes[2].plot(epochs, history["val_spearman"], "o-")
    axes[2].set(title="validation Spearman rho", xlabel="epoch", ylim=(0, 1))
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def train(config: TrainConfig, ctx: DistributedContext | None = None) -> tuple[ProgressJudge, dict]:
    """Train a judge; the main process writes it to `config.out`. Returns (judge, metrics)."""
    torch.set_num_threads(config.threads)
    torch.manual_seed(config.seed)
    ctx = ctx or setup_distributed(config.device)
    judge = ProgressJudge(config.judge).to(ctx.device)
    train_eps, val_eps = split_episodes(load_episodes(config.stores), config.val_every)
    if not train_eps or not val_eps:
        raise ValueError(f"stores {config.stores} hold too few episodes to split 1 in {config.val_every}")
    real_train = len(train_eps)
    if config.world is not None:  # seeded twins: every DDP rank imagines the same, nothing to exchange
        train_eps = train_eps + imagined_twins(
            train_eps, config.world, ctx.device, show=config.show_progress and ctx.is_main
        )
    prior: dict[str, float] = {}
    if config.prior and ctx.is_main:  # DDP starts every rank from rank 0's weights
        robots = sorted({e.composition.robot for e in train_eps})
        prior = pretrain_encoder(judge, robots, config.perception, config.show_progress)
    train_set = SegmentDataset(train_eps, judge, config.segments, seed=config.seed + ctx.rank)
    val_set = SegmentDataset(val_eps, judge, SegmentConfig(max_len=config.segments.max_len, augment=False))
    loader = ctx.train_loader(train_set, config.batch_segments, config.seed, collate_fn=collate_segments)
    val_loader = DataLoader(val_set, batch_size=config.batch_segments, collate_fn=collate_segments)
    if config.prior and config.freeze_encoder:
        judge.encoder.requires_grad_(False)
    model = ctx.wrap(judge)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=config.lr, weight_decay=config.weight_decay)
    total = config.epochs * len(loader)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: 0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * min(step, total) / total))
    )
    history: dict[str, list[float]] = {"train_loss": [], "val_loss": [], "val_mae": [], "val_spearman": []}
    bar = tqdm(total=total, desc="judge", disable=not (config.show_progress and ctx.is_main))
    started = time.perf_counter()
    for epoch in range(config.epochs):
        if isinstance(loader.sampler, DistributedSampler):
            loader.sampler.set_epoch(epoch)
        for batch in loader:
            mask = batch[KEY_MASK].to(ctx.device)
            logits, _ = model(
                batch[KEY_FRAMES].to(ctx.device),
                batch[KEY_COND].to(ctx.device),
                mask,
                batch[KEY_PROPRIO].to(ctx.device),
            )
            known = batch[KEY_PROGRESS_KNOWN].to(ctx.device)
            loss = masked_loss(logits, batch[KEY_TARGET].to(ctx.device), mask, known, config)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            schedule.step()
            history["train_loss"].append(ctx.mean(loss.item()))
            bar.set_postfix(epoch=epoch, loss=f"{history['train_loss'][-1]:.4f}")
            bar.update()
        for key, value in validate(judge, val_loader, ctx.device, config).items():
            history[key].append(value)
    bar.close()
    metrics = {
        **prior,
        **{key: values[-1] for key, values in history.items()},
        "train_segments": len(train_set),
        "val_segments": len(val_set),
        "train_frames": int(sum(len(e) for e in train_eps)),
        "train_episodes": real_train,
        "imagined_twins": len(train_eps) - real_train,
        "epochs": config.epochs,
        "world_size": ctx.world_size,
        "wall_s": time.perf_counter() - started,
    }
    if ctx.is_main:
        out = Path(config.out)
        save_judge(out, unwrap(model), config.verdict, {**metrics, "train_config": jsonable(asdict(config))})
        (out / "metrics.json").write_text(json.dumps({"final": metrics, "history": history}, indent=2) + "\n")
        plot_curves(history, out / "curves.png")
    return judge.eval(), metrics


def main() -> None:
    config = tyro.cli(TrainConfig, description=__doc__)
    ctx = setup_distributed(config.device)
    _, metrics = train(config, ctx)
    if ctx.is_main:
        print(json.dumps({k: v for k, v in metrics.items() if not isinstance(v, dict)}, indent=2))
    ctx.close()  # not on an error: its barrier would wait for ranks that may be stuck elsewhere


if __name__ == "__main__":
    main()

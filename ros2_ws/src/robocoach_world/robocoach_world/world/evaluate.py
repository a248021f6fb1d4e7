"""Open-loop prediction quality of a CoachWorld checkpoint on held-out episodes.

Each held-out window gives the model its real history and the episode's real actions; the model
imagines N steps with prior samples and is scored per horizon h = 1..N against the real frames:
PSNR (dB, on the uint8 frames the imagination loop sees) vs a copy-last-frame baseline, and joint
error (mean |rad| on the arm's joints) vs copy-last-proprio and vs "joints = commanded target".
Also a PNG strip of real vs imagined frames, and (`--throughput`) imagined steps per second.

    python -m robocoach_world.world.evaluate --checkpoint runs/world/checkpoint \\
        --stores runs/world_data/demos runs/world_data/rollouts --horizon 16 --out runs/world/eval

The held-out split is the checkpoint's (`meta["held_out_fraction"]`), so train never saw these.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch
import tyro
from torch.utils.data import DataLoader, Subset
from tqdm import tqdm

from robocoach_skills.action_contract import ACTION_DIM, MAX_JOINTS, pad, robot_id, unpad
from robocoach_skills.checkpoint import jsonable
from robocoach_skills.constants import ROBOTS
from robocoach_skills.data.episode import Episode
from robocoach_world.world.artifacts import load_world
from robocoach_world.world.data import WindowDataset, WindowSpec, select_episodes
from robocoach_world.world.model import CoachWorld


def psnr(pred: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """Per-frame PSNR [dB] of uint8 frames (..., S, S, 3) -> (...); identical frames give 100 dB."""
    mse = ((pred.float() - real.float()) / 255.0).pow(2).mean(dim=(-3, -2, -1))
    return 10 * torch.log10(1.0 / mse.clamp(min=1e-10))


def full_windows(dataset: WindowDataset, stride: int) -> Subset:
    """Windows whose whole horizon lies inside the episode, every `stride`-th start."""
    horizon = dataset.spec.horizon
    keep = [
        i
        for i, (e, t) in enumerate(dataset.index)
        if t % stride == 0 and t + horizon <= len(dataset.images[e]) - 1
    ]
    return Subset(dataset, keep)


@torch.no_grad()
def open_loop_scores(
    model: CoachWorld, windows: Subset, batch_size: int = 32, seed: int = 0
) -> dict[str, list[float]]:
    """Per-horizon means over `windows` (all full): psnr_model/psnr_copy_last, joint_mae_* [rad]."""
    sums: dict[str, torch.Tensor] = {}
    count = 0
    generator = torch.Generator().manual_seed(seed)
    joints = torch.zeros(ACTION_DIM, dtype=torch.bool)
    joints[:MAX_JOINTS] = True
    for batch in DataLoader(windows, batch_size=batch_size):
        ids = batch["robot_id"]
        state = model.observe(batch["history_images"], batch["history_proprio"], ids)
        _, frames, proprio = model.imagine(state, batch["actions"], ids, generator)
        real = batch["future_images"]
        last = batch["history_images"][:, -1:].expand_as(real)
        real_p, last_p = batch["future_proprio"], batch["history_proprio"][:, -1:]
        mask = model.channel_masks[ids.to(model.device)].cpu().bool()[:, None] & joints  # (B, 1, 8)
        parts = {
            "psnr_model": psnr(frames.cpu(), real),
            "psnr_copy_last": psnr(last, real),
            "joint_mae_model": _joint_mae(proprio.cpu(), real_p, mask),
            "joint_mae_copy_last": _joint_mae(last_p.expand_as(real_p), real_p, mask),
            "joint_mae_target": _joint_mae(batch["actions"], real_p, mask),
        }
        for key, value in parts.items():
            sums[key] = sums.get(key, 0) + value.sum(0)
        count += len(ids)
    if count == 0:
        raise ValueError("no full-horizon windows to score (episodes shorter than the horizon?)")
    return {key: (value / count).tolist() for key, value in sums.items()} | {"windows": [count]}


def _joint_mae(pred: torch.Tensor, real: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B, N, 8) vs (B, N, 8) -> (B, N) mean |error| over the channels `mask` (B, 1, 8) keeps."""
    return ((pred - real).abs() * mask).sum(-1) / mask.sum(-1)


@torch.no_grad()
def strip(model: CoachWorld, windows: Subset, n: int, columns: int, seed: int = 0) -> np.ndarray:
    """(2n*S, columns*S, 3) uint8: for n windows spread over the set, a real row over an imagined row."""
    picks = np.linspace(0, len(windows) - 1, n).round().astype(int)
    batch = next(iter(DataLoader(Subset(windows, picks.tolist()), batch_size=n)))
    ids = batch["robot_id"]
    state = model.observe(batch["history_images"], batch["history_proprio"], ids)
    _, frames, _ = model.imagine(state, batch["actions"], ids, torch.Generator().manual_seed(seed))
    cols = np.linspace(0, frames.shape[1] - 1, min(columns, frames.shape[1])).round().astype(int)
    rows = []
    for i in range(len(picks)):
        rows.append(np.concatenate(batch["future_images"][i, cols].numpy(), axis=1))
        rows.append(np.concatenate(frames[i, cols].cpu().numpy(), axis=1))
    return np.concatenate(rows, axis=0)


@torch.no_grad()
def imagined_twin(model: CoachWorld, episode: Episode, seed: int = 0) -> Episode:
    """`episode` with its video and proprio replaced by CoachWorld's open-loop rollout of the episode's
    own actions from its first frame: imagined video that keeps the simulator's labels of what those
    actions did (the proprio too is imagined, as in closed-loop imagination: the grasp check reads it).

    This is how the judge is measured on imagined video: where the world model is faithful, the
    labels fit the imagined frames; where it is not, the judge's score drops with it.
    """
    robot = episode.composition.robot
    ids = torch.tensor([robot_id(robot)])
    proprio = torch.as_tensor(pad(robot, episode.proprio[:1].astype(np.float32)))[None]  # (1, 1, 8)
    state = model.observe(torch.as_tensor(episode.images[:1])[None], proprio, ids)
    images, imagined_proprio = episode.images[:1], episode.proprio[:1]
    if len(episode) > 1:  # frame t + 1 follows action t
        actions = torch.as_tensor(pad(robot, episode.actions[:-1].astype(np.float32)))[None]
        _, frames, predicted = model.imagine(state, actions, ids, torch.Generator().manual_seed(seed))
        images = np.concatenate([images, frames[0].cpu().numpy()])
        predicted = unpad(robot, predicted[0].cpu().numpy()).astype(episode.proprio.dtype)
        imagined_proprio = np.concatenate([imagined_proprio, predicted])
    return replace(episode, images=images, proprio=imagined_proprio)


def imagined_twins(
    episodes: list[Episode], world_dir: Path, device: str | torch.device | None = None, show: bool = True
) -> list[Episode]:
    """`imagined_twin` of each episode by the CoachWorld at `world_dir` (generation seed 0, so every
    process, e.g. each DDP rank, imagines the same twins), with a progress bar when `show`."""
    world, _ = load_world(world_dir, device)
    bar = tqdm(episodes, desc="imagined twins", unit="episode", disable=not show)
    return [imagined_twin(world, episode) for episode in bar]


@torch.no_grad()
def imagine_throughput(model: CoachWorld, batch: int, chunk: int, seconds: float = 3.0) -> float:
    """Imagined policy steps per second of `imagine` (batch x chunk per call), after one warm-up call."""
    size = model.config.image_size
    ids = torch.arange(batch) % len(ROBOTS)
    state = model.observe(
        torch.zeros(batch, 1, size, size, 3, dtype=torch.uint8), torch.zeros(batch, 1, 8), ids
    )
    actions, generator = torch.zeros(batch, chunk, ACTION_DIM), torch.Generator().manual_seed(0)
    model.imagine(state, actions, ids, generator)
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        state, frames, _ = model.imagine(state, actions, ids, generator)
        calls += 1
    frames.cpu()  # wait for an accelerator to finish
    return calls * batch * chunk / (time.perf_counter() - start)


@dataclass
class EvalConfig:
    """Evaluate a CoachWorld checkpoint open-loop on the held-out episodes of some stores."""

    checkpoint: Path  # checkpoint directory written by world.train (<out>/checkpoint)
    stores: tuple[Path, ...]  # episode stores; only their held-out episodes are scored
    out: Path = Path("runs/world/eval")  # where metrics.json and strip.png go
    horizon: int = 16  # imagined steps per window (may exceed the training horizon)
    history: int | None = None  # real frames observed; None: the checkpoint's training history
    stride: int = 4  # every stride-th window start of each episode
    batch_size: int = 32
    strip_windows: int = 4  # windows shown in strip.png
    seed: int = 0  # generation seed
    threads: int = 1  # torch CPU threads
    throughput: bool = False  # also time imagine() at batch 1 and 64, K = 1 and 8
    device: str | None = None  # None: select_device()
    throughput_batches: tuple[int, ...] = (1, 64)  # batch sizes timed with --throughput


def main(config: EvalConfig) -> dict:
    torch.set_num_threads(config.threads)
    model, meta = load_world(config.checkpoint, config.device)
    history = config.history or meta["train"]["window"]["history"]
    episodes = select_episodes(list(config.stores), meta["held_out_fraction"], held_out=True)
    windows = full_windows(WindowDataset(episodes, WindowSpec(history, config.horizon)), config.stride)
    scores = open_loop_scores(model, windows, config.batch_size, config.seed)
    report = {
        "checkpoint": str(config.checkpoint),
        "episodes": len(episodes),
        "config": jsonable(asdict(config)),
    }
    report["per_horizon"] = scores
    print(f"{len(episodes)} held-out episodes, {scores['windows'][0]} windows, horizon {config.horizon}")
    print(" h  PSNR model  copy-last  | joint MAE [rad] model  copy-last  target")
    for h in range(config.horizon):
        print(
            f"{h + 1:2d}  {scores['psnr_model'][h]:10.2f}  {scores['psnr_copy_last'][h]:9.2f}  |"
            f"  {scores['joint_mae_model'][h]:20.4f}  {scores['joint_mae_copy_last'][h]:9.4f}"
            f"  {scores['joint_mae_target'][h]:6.4f}"
        )
    if config.throughput:
        report["throughput_steps_per_s"] = {
            f"batch{b}_k{k}": imagine_throughput(model, b, k)
            for b in config.throughput_batches
            for k in (1, 8)
        }
        for key, value in report["throughput_steps_per_s"].items():
            print(f"imagine throughput {key}: {value:.0f} steps/s")
    config.out.mkdir(parents=True, exist_ok=True)
    (config.out / "metrics.json").write_text(json.dumps(report, indent=2))
    image = strip(model, windows, config.strip_windows, columns=8, seed=config.seed)
    save_strip(image, config.out / "strip.png", "rows: real / imagined (pairs), columns: horizon 1 .. N")
    return report


def save_strip(image: np.ndarray, path: Path, title: str) -> None:
    """A uint8 frame mosaic as a PNG, at 2x its pixel size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(image.shape[1] / 48, image.shape[0] / 48))
    ax.imshow(image, interpolation="nearest")
    ax.set_title(title, fontsize=8)
    ax.axis("off")
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


if __name__ == "__main__":
    main(tyro.cli(EvalConfig))

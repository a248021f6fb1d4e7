"""Training windows for CoachWorld: (real history, future actions, future frames and proprio).

Window (episode, t) holds frames/proprio t-Th+1 .. t (padded at the episode start by repeating
frame 0, like `EpisodeDataset`), actions t .. t+K-1 and the frames/proprio t+1 .. t+K they lead to
(frame t is observed, then action t is applied). Past the episode's end the last step repeats and
`valid` is False. Proprio and actions are padded to ACTION_DIM so both arms share a batch.

Episodes come from any number of stores, demos and rollouts alike (failures included: the world
model must be able to imagine failing). A fixed, content-keyed share of episodes is held out for
evaluation (`is_held_out`), so train and evaluate agree on the split without sharing files.

Every selected episode is decoded into memory once (64x64 frames: 12 kB each, ~1 GB per 80k steps).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from robocoach_skills.action_contract import pad, robot_id
from robocoach_skills.data.store import EpisodeMeta, EpisodeStore

WINDOW_KEYS = (
    "history_images",  # (Th, S, S, 3) uint8
    "history_proprio",  # (Th, 8) float32, padded
    "actions",  # (K, 8) float32 padded joint targets + gripper command
    "future_images",  # (K, S, S, 3) uint8
    "future_proprio",  # (K, 8) float32
    "valid",  # (K,) bool, False past the episode's end
    "robot_id",  # () long
)


@dataclass(frozen=True)
class WindowSpec:
    history: int = 2  # real frames the model observes before imagining (Th)
    horizon: int = 8  # imagined steps per window (K)

    def __post_init__(self) -> None:
        if self.history < 1 or self.horizon < 1:
            raise ValueError(f"history and horizon must be >= 1, got {self.history!r}, {self.horizon!r}")


def is_held_out(meta: EpisodeMeta, fraction: float) -> bool:
    """Deterministic episode split keyed on what the episode is, not where it is stored."""
    key = f"{meta.composition.name}|{meta.seed}|{meta.kind}|{meta.length}"
    return zlib.crc32(key.encode()) % 10_000 < round(fraction * 10_000)


def select_episodes(
    stores: list[Path], held_out_fraction: float, held_out: bool
) -> list[tuple[EpisodeStore, str]]:
    """(store, episode id) of every episode on the chosen side of the split, store by store."""
    chosen = []
    for root in stores:
        store = EpisodeStore(root)
        for meta in store.iter_meta():
            if meta.length >= 2 and is_held_out(meta, held_out_fraction) == held_out:
                chosen.append((store, meta.episode_id))
    return chosen


class WindowDataset(Dataset):
    """Every window start t in 0 .. T-2 of every given episode (see the module docstring)."""

    def __init__(self, episodes: list[tuple[EpisodeStore, str]], spec: WindowSpec) -> None:
        self.spec = spec
        self.images, self.proprio, self.actions, self.robot_ids, self.names = [], [], [], [], []
        starts = []
        for store, episode_id in episodes:
            episode = store.get(episode_id)
            self.images.append(episode.images)
            self.proprio.append(pad(episode.robot, episode.proprio))
            self.actions.append(pad(episode.robot, episode.actions))
            self.robot_ids.append(robot_id(episode.robot))
            self.names.append(f"{store.root.name}/{episode_id}")
            starts += [(len(self.images) - 1, t) for t in range(len(episode) - 1)]
        self.index = np.asarray(starts, dtype=np.int64).reshape(-1, 2)

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        e, t = (int(v) for v in self.index[i])
        n = len(self.images[e])
        past = np.clip(np.arange(t - self.spec.history + 1, t + 1), 0, None)
        steps = np.arange(t, t + self.spec.horizon)
        future = np.minimum(steps + 1, n - 1)
        return {
            "history_images": torch.from_numpy(self.images[e][past]),
            "history_proprio": torch.from_numpy(self.proprio[e][past]),
            "actions": torch.from_numpy(self.actions[e][np.minimum(steps, n - 1)]),
            "future_images": torch.from_numpy(self.images[e][future]),
            "future_proprio": torch.from_numpy(self.proprio[e][future]),
            "valid": torch.from_numpy(steps + 1 < n),
            "robot_id": torch.tensor(self.robot_ids[e]),
        }

"""Per-step training samples from an episode store, as a torch Dataset.

Sample i is step t of one episode: the frame(s) observed up to t, and the chunk of actions the
policy should emit from t on. Episodes are read lazily (an LRU cache of decoded episodes per
process) so the dataset is cheap to build and to send to DataLoader workers.

    config = DatasetConfig(chunk_len=8, robot="franka", skill="pick")
    loader = DataLoader(EpisodeDataset(EpisodeStore(root), config), batch_size=64, num_workers=4)
    batch = next(iter(loader))  # batch["image"]: (64, 3, H, W) float in [0, 1]

Sample keys (shapes without the batch axis; with history > 1 image and proprio gain a leading
(history,) axis, oldest first, padded by repeating the episode's first frame):

    image          (3, H, W) float32    frame t, RGB in [0, 1]
    subtask_start_image (3, H, W) f32   the first frame of the active subtask's segment (the experts'
                                        object memory, ExpertConfig.argument_memory)
    proprio        (D,) float32         joint positions [rad] + gripper opening at t
    action_chunk   (chunk_len, D) f32   actions t .. t+chunk_len-1, the last one repeated past the end
    action_mask    (chunk_len,) bool    True where action_chunk holds a real (not repeated) action
    progress       () float32           ground-truth progress of the active subtask at t
    subtask_index  () int64             index of the active subtask at t
    done           () float32           1.0 where the active subtask is achieved at t (see `done_flags`)
    episode_id     () int64             the store index of the episode (123 for "episode_000123")
    frame_index    () int64             t
    robot_id       () int64             index into constants.ROBOTS
    skill          str                  skill of the active subtask (a DataLoader batches these as a list)
    arguments      (2,) int64           object and target ids of the active subtask (see argument_ids)
With `pad_channels` set, D is action_contract.ACTION_DIM for every robot (joints, zeros, gripper
last) and `channel_mask` (ACTION_DIM,) bool marks the robot's real channels, so both arms share a batch.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import Dataset

from robocoach_skills import action_contract
from robocoach_skills.constants import (
    KEY_ACTION_CHUNK,
    KEY_ACTION_MASK,
    KEY_ARGUMENTS,
    KEY_CHANNEL_MASK,
    KEY_DONE,
    KEY_EPISODE_ID,
    KEY_FRAME_INDEX,
    KEY_PROGRESS,
    KEY_ROBOT_ID,
    KEY_SKILL,
    KEY_SUBTASK_INDEX,
    KEY_SUBTASK_START,
    OBS_IMAGE,
    OBS_PROPRIO,
    ROBOTS,
)
from robocoach_skills.data.episode import EPISODE_KINDS, Episode
from robocoach_skills.data.store import EpisodeStore, episode_index


@dataclass
class DatasetConfig:
    """Which episodes to serve and how to cut them into samples."""

    chunk_len: int = 16  # actions per sample (action chunking); 1 = single-step behaviour cloning
    history: int = 1  # frames per sample ending at t; 1 = no time axis on image/proprio
    robot: str | None = None  # keep only this robot's episodes (one of constants.ROBOTS); None = all
    skill: str | None = None  # keep episodes with a subtask of this skill; None = all
    kind: str | None = None  # "demo" or "rollout"; None = both
    success: bool | None = None  # keep only successful (True) or failed (False) episodes; None = all
    pad_channels: bool = False  # pad proprio/actions to action_contract.ACTION_DIM (to batch both arms)
    # Decoded episodes kept per process (each DataLoader worker has its own), in MB of arrays; a 60-step
    # demo at 64 px is 0.75 MB. Shuffled batches draw from every episode, so a cache smaller than the
    # set decodes almost every sample afresh (8 cached episodes: 3x slower, bench/adapter_update.py).
    cache_mb: float = 1024.0
    episode_ids: tuple[str, ...] | None = None  # keep only these episodes (a coach's demo mix); None = all

    def __post_init__(self) -> None:
        if self.chunk_len < 1:
            raise ValueError(f"chunk_len must be >= 1, got {self.chunk_len!r}")
        if self.history < 1:
            raise ValueError(f"history must be >= 1, got {self.history!r}")
        if self.robot is not None and self.robot not in ROBOTS:
            raise ValueError(f"robot {self.robot!r} is not one of {ROBOTS}")
        if self.kind is not None and self.kind not in EPISODE_KINDS:
            raise ValueError(f"kind {self.kind!r} is not one of {EPISODE_KINDS}")
        if self.cache_mb < 0:
            raise ValueError(f"cache_mb must be >= 0, got {self.cache_mb!r}")


def done_flags(subtask_index: np.ndarray, progress: np.ndarray, success: bool) -> np.ndarray:
    """(T,) float32: 1 wherever the active subtask is already achieved, else 0.

    Achieved means ground-truth progress reached 1 (it latches in the sim; on hardware it is the
    operator's label), or the segment ended by switching to the next subtask; the episode's final
    segment counts as ended only if the episode succeeded (a failed rollout stops mid-subtask).
    Labelling every achieved frame, not just the last one, gives the done head a balanced target
    it can learn from a handful of demos.

    >>> done_flags(np.array([0, 0, 1, 1, 1]), np.array([0.5, 0.9, 0.2, 1.0, 1.0]), success=False).tolist()
    [0.0, 1.0, 0.0, 1.0, 1.0]
    """
    done = (progress >= 1.0).astype(np.float32)
    done[:-1] = np.maximum(done[:-1], subtask_index[1:] != subtask_index[:-1])
    done[-1] = max(done[-1], float(success))
    return done


def segment_starts(subtask_index: np.ndarray) -> np.ndarray:
    """(T,) int64: for each frame, the first frame of its subtask segment.

    >>> segment_starts(np.array([0, 0, 1, 1, 1, 2])).tolist()
    [0, 0, 2, 2, 2, 5]
    """
    changed = np.flatnonzero(np.diff(subtask_index)) + 1
    starts = np.zeros(len(subtask_index), dtype=np.int64)
    starts[changed] = changed
    return np.maximum.accumulate(starts)


class EpisodeDataset(Dataset):
    """Every step of every matching episode in a store, as a dict of tensors (keys: module docstring).

    The episode list is fixed when the dataset is built; episodes added later are not seen.
    """

    def __init__(self, store: EpisodeStore, config: DatasetConfig | None = None) -> None:
        self.store = store
        self.config = config or DatasetConfig()
        c = self.config
        metas = list(store.iter_meta(kind=c.kind, robot=c.robot, skill=c.skill, success=c.success))
        if c.episode_ids is not None:
            wanted = set(c.episode_ids)
            metas = [m for m in metas if m.episode_id in wanted]
        self.episode_ids = [m.episode_id for m in metas]
        self._starts = np.cumsum([0] + [m.length for m in metas])  # sample index of each episode's step 0
        self._cache: OrderedDict[str, tuple[Episode, np.ndarray, np.ndarray]] = OrderedDict()
        self._cached_bytes = 0

    def __len__(self) -> int:
        return int(self._starts[-1])

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        if not 0 <= index < len(self):
            raise IndexError(f"sample {index} out of range for a dataset of {len(self)}")
        k = int(np.searchsorted(self._starts, index, side="right")) - 1
        episode_id, t = self.episode_ids[k], index - int(self._starts[k])
        episode, done, segment_start = self._load(episode_id)
        c = self.config
        n = len(episode)

        frames = np.clip(np.arange(t - c.history + 1, t + 1), 0, None)  # (history,)
        steps = np.arange(t, t + c.chunk_len)  # (chunk_len,)
        images = torch.from_numpy(episode.images[frames]).permute(0, 3, 1, 2).float() / 255.0  # (h, 3, H, W)
        proprio = torch.from_numpy(episode.proprio[frames])  # (h, D)
        action_chunk = torch.from_numpy(episode.actions[np.minimum(steps, n - 1)])  # (chunk_len, D)
        if c.history == 1:
            images, proprio = images[0], proprio[0]
        start = torch.from_numpy(episode.images[segment_start[t]]).permute(2, 0, 1).float() / 255.0

        subtask = episode.composition.subtasks[int(episode.subtask_index[t])]
        sample = {
            OBS_IMAGE: images,
            KEY_SUBTASK_START: start,
            OBS_PROPRIO: proprio,
            KEY_ACTION_CHUNK: action_chunk,
            KEY_ACTION_MASK: torch.from_numpy(steps < n),
            KEY_PROGRESS: torch.tensor(episode.progress[t], dtype=torch.float32),
            KEY_SUBTASK_INDEX: torch.tensor(int(episode.subtask_index[t])),
            KEY_DONE: torch.tensor(done[t]),
            KEY_EPISODE_ID: torch.tensor(episode_index(episode_id)),
            KEY_FRAME_INDEX: torch.tensor(t),
            KEY_ROBOT_ID: torch.tensor(ROBOTS.index(episode.robot)),
            KEY_SKILL: subtask.skill,
            KEY_ARGUMENTS: torch.tensor(action_contract.argument_ids(subtask)),
        }
        if c.pad_channels:
            robot = episode.robot
            sample[OBS_PROPRIO] = torch.from_numpy(action_contract.pad(robot, sample[OBS_PROPRIO].numpy()))
            sample[KEY_ACTION_CHUNK] = torch.from_numpy(action_contract.pad(robot, action_chunk.numpy()))
            sample[KEY_CHANNEL_MASK] = torch.from_numpy(action_contract.channel_mask(robot))
        return sample

    def _load(self, episode_id: str) -> tuple[Episode, np.ndarray, np.ndarray]:
        """The decoded episode, its done flags and segment starts, through a per-process LRU cache (the
        newest stays)."""
        if episode_id in self._cache:
            self._cache.move_to_end(episode_id)
            return self._cache[episode_id]
        episode = self.store.get(episode_id)
        done = done_flags(episode.subtask_index, episode.progress, episode.success)
        self._cache[episode_id] = (episode, done, segment_starts(episode.subtask_index))
        self._cached_bytes += _nbytes(episode)
        while self._cached_bytes > self.config.cache_mb * 1e6 and len(self._cache) > 1:
            self._cached_bytes -= _nbytes(self._cache.popitem(last=False)[1][0])
        return self._cache[episode_id]

    def __getstate__(self) -> dict:
        """Send workers an empty cache: decoded episodes would cost more to pickle than to reload."""
        return {**self.__dict__, "_cache": OrderedDict(), "_cached_bytes": 0}


def _nbytes(episode: Episode) -> int:
    return episode.images.nbytes + episode.proprio.nbytes + episode.actions.nbytes

"""Judge training samples: one subtask segment of one episode, all its frames with their labels.

A segment is the run of frames where one subtask was active (its ground-truth `subtask_index`), as
the judge meets it online: from the subtask's first frame on, with ground-truth progress per frame.
Augmentations match what online judging does to segment starts and to cameras, and what experts do
to the pace of a subtask:
  * start jitter: the judge starts a subtask right after it detected the previous one done, which
    may be a few frames before or after the recorded boundary; frames before the boundary belong to
    the previous subtask and are labelled progress 0 for the new one;
  * a random shift of the whole segment by a few pixels (one camera pose per segment);
  * time warp (off by default): frames held or skipped at random, labels following their frames, so
    that the time since the subtask started says less about its progress than the frames do (an
    expert stalls or hurries where the scripted demos never do);
  * counterfactual objects (off by default): the segment judged as the same skill on another object
    of its kind (another cube, the other button). That subtask did not happen, so its done target is
    0 throughout; its progress is not scored (how near the hand came to the other object is not in
    the labels). Failures where the operator worked on the wrong object are a few per corpus; this
    gives the done head one for every segment.
  * held tail: the segment's last frame, its hand and its label repeated a random number of steps,
    as a robot that stays where it stopped. Scripted demos move on as soon as a subtask is done, so
    without it a long segment is mostly a failure and the judge learns a clock: an expert that
    completed a pick and held it saw its done score decay back to 0.1 (session 35).

Sample: frames (L, H, W, 3) uint8, proprio (L, 8) float32 padded (`action_contract.pad`), progress (L,)
float32, cond (4,) long (see ProgressJudge.condition), progress_known () bool (False for a counterfactual
sample).
The dataset holds the frames of its episodes in memory (12 KB per 64x64 frame).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from robocoach_skills.action_contract import pad
from robocoach_skills.composition import Subtask
from robocoach_skills.data.episode import Episode
from robocoach_skills.data.store import EpisodeStore
from robocoach_skills.sim.layout import BUTTONS, CUBES
from robocoach_world.judge.model import ProgressJudge

KEY_FRAMES, KEY_TARGET, KEY_COND, KEY_MASK = "frames", "progress", "cond", "mask"
KEY_PROPRIO = "proprio"  # (L, 8) padded proprio of each frame: the hand the judge reads
KEY_PROGRESS_KNOWN = "progress_known"  # the sample's progress targets are labels (not a counterfactual)
OBJECT_KINDS: tuple[tuple[str, ...], ...] = (CUBES, BUTTONS)  # objects one skill acts on interchangeably


def load_episodes(stores: Sequence[Path]) -> list[Episode]:
    """Every episode of every store, in store order (training, calibration and test sets alike)."""
    out = []
    for root in stores:
        store = EpisodeStore(root)
        out += [store.get(i) for i in store.ids()]
    return out


@dataclass(frozen=True)
class SegmentConfig:
    """How segments are cut and augmented."""

    # frames kept from a segment's start (longer failures are cut); time-warped, they span more or
    # fewer policy steps than that
    max_len: int = 200
    start_jitter: tuple[int, int] = (-8, 2)  # segment start shifted by this many frames (min, max)
    shift_px: int = 3  # random shift of a segment's frames, up to this many pixels each way
    time_warp: float = 0.0  # per frame: probability of holding the last frame, and of skipping one
    # per segment with other objects of its kind: probability of judging it as one of them instead
    counterfactual: float = 0.0
    held_tail: int = 60  # per segment: its last frame held for 0..held_tail more steps (within max_len)
    augment: bool = True  # False for validation: exact starts, no shift, no warp, no counterfactuals

    def __post_init__(self) -> None:
        lo, hi = self.start_jitter
        if (
            self.max_len < 1
            or lo > 0
            or hi < 0
            or self.shift_px < 0
            or not 0 <= self.time_warp < 0.5
            or not 0 <= self.counterfactual <= 1
            or self.held_tail < 0
        ):
            raise ValueError(
                "SegmentConfig needs max_len >= 1, start_jitter (<= 0, >= 0), shift_px >= 0, 0 <= time_warp "
                f"< 0.5, 0 <= counterfactual <= 1, held_tail >= 0; got {self}"
            )


@dataclass(frozen=True)
class Segment:
    episode: int  # index into the dataset's episodes
    start: int  # first frame labelled with this subtask
    end: int  # one past its last frame
    index: int  # subtask index in the episode's composition
    subtask: Subtask
    robot: str


def segments_of(episode: Episode, position: int) -> list[Segment]:
    # (any object with `subtask_index` and `composition` will do: imagined rollouts too)
    """The contiguous runs of each subtask index in an episode."""
    labels = episode.subtask_index.astype(np.int64)
    cuts = np.flatnonzero(np.diff(labels)) + 1
    bounds = [0, *cuts.tolist(), len(labels)]
    return [
        Segment(
            position,
            a,
            b,
            int(labels[a]),
            episode.composition.subtasks[int(labels[a])],
            episode.composition.robot,
        )
        for a, b in itertools.pairwise(bounds)
    ]


class SegmentDataset(Dataset):
    """Every subtask segment of `episodes`, as judge training samples (see the module docstring)."""

    def __init__(
        self, episodes: Sequence[Episode], judge: ProgressJudge, config: SegmentConfig, seed: int = 0
    ):
        self.episodes = list(episodes)
        self.config = config
        self.segments = [s for k, e in enumerate(self.episodes) for s in segments_of(e, k)]
        self.conds = judge.condition(
            [s.robot for s in self.segments], [s.subtask for s in self.segments]
        ).cpu()
        # per segment: the conditions of the same skill on each other object of its kind; None where
        # there is none or counterfactuals are off (then no random draw is spent on them either)
        self.counterfactual_conds: list[torch.Tensor | None] = [None] * len(self.segments)
        if config.augment and config.counterfactual:
            for k, s in enumerate(self.segments):
                others = other_objects(s.subtask)
                if others:
                    self.counterfactual_conds[k] = judge.condition([s.robot] * len(others), others).cpu()
        self.rng = np.random.default_rng(seed)

    def __len__(self) -> int:
        return len(self.segments)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        s, c = self.segments[i], self.config
        episode = self.episodes[s.episode]
        start = s.start
        if c.augment:
            lo, hi = c.start_jitter
            start = int(np.clip(start + self.rng.integers(lo, hi + 1), 0, s.end - 1))
        index = self._frame_index(start, s.end)  # (L,) frames of the episode, in order
        if c.augment and c.held_tail:
            held = min(int(self.rng.integers(c.held_tail + 1)), c.max_len - len(index))
            index = np.concatenate([index, np.full(held, index[-1])])
        frames = episode.images[index]  # (L, H, W, 3)
        proprio = pad(s.robot, episode.proprio[index].astype(np.float32))  # (L, 8)
        progress = episode.progress[index].copy()  # (L,)
        progress[index < s.start] = 0.0  # previous subtask's tail: the new one has not begun
        if c.augment and c.shift_px:
            frames = _shift(frames, self.rng.integers(-c.shift_px, c.shift_px + 1, size=2))
        cond, known = self.conds[i], True
        others = self.counterfactual_conds[i]
        if others is not None and self.rng.random() < c.counterfactual:
            cond, known = others[self.rng.integers(len(others))], False
            progress[:] = 0.0  # not done at any frame (the progress channel is not scored)
        return {
            KEY_FRAMES: torch.from_numpy(np.ascontiguousarray(frames)),
            KEY_PROPRIO: torch.from_numpy(proprio),
            KEY_TARGET: torch.from_numpy(progress.astype(np.float32)),
            KEY_COND: cond,
            KEY_PROGRESS_KNOWN: torch.tensor(known),
        }

    def _frame_index(self, start: int, end: int) -> np.ndarray:
        """Up to max_len frame indices from `start`, below `end`: consecutive, or time-warped."""
        c = self.config
        if not (c.augment and c.time_warp):
            return np.arange(start, min(end, start + c.max_len))
        steps = self.rng.choice(3, size=c.max_len, p=[c.time_warp, 1 - 2 * c.time_warp, c.time_warp])
        index = start + np.concatenate([[0], np.cumsum(steps[:-1])])  # hold 0, advance 1, skip 2
        return index[index < end]


def other_objects(subtask: Subtask) -> list[Subtask]:
    """The same subtask on each other object of its object's kind ([] where there is none: the drawer).

    >>> [s.object for s in other_objects(Subtask("press_button", "red_button"))]
    ['green_button']
    """
    kind = next((k for k in OBJECT_KINDS if subtask.object in k), ())
    return [replace(subtask, object=other) for other in kind if other != subtask.object]


def _shift(frames: np.ndarray, offset: np.ndarray) -> np.ndarray:
    """Translate (L, H, W, 3) frames by (dy, dx) pixels, repeating the edge pixels."""
    pad = int(np.abs(offset).max())
    if pad == 0:
        return frames
    h, w = frames.shape[1:3]
    padded = np.pad(frames, ((0, 0), (pad, pad), (pad, pad), (0, 0)), mode="edge")
    dy, dx = pad + int(offset[0]), pad + int(offset[1])
    return padded[:, dy : dy + h, dx : dx + w]


def collate_segments(samples: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Pad segments to the longest one: frames (B, T, H, W, 3), proprio (B, T, 8), progress (B, T), cond
    (B, 4), mask (B, T), progress_known (B,)."""
    longest = max(len(s[KEY_TARGET]) for s in samples)
    b = len(samples)
    frames = torch.zeros((b, longest, *samples[0][KEY_FRAMES].shape[1:]), dtype=torch.uint8)
    proprio = torch.zeros((b, longest, samples[0][KEY_PROPRIO].shape[-1]))
    progress = torch.zeros(b, longest)
    mask = torch.zeros(b, longest, dtype=torch.bool)
    for k, s in enumerate(samples):
        n = len(s[KEY_TARGET])
        frames[k, :n], proprio[k, :n], progress[k, :n] = s[KEY_FRAMES], s[KEY_PROPRIO], s[KEY_TARGET]
        mask[k, :n] = True
    return {
        KEY_FRAMES: frames,
        KEY_PROPRIO: proprio,
        KEY_TARGET: progress,
        KEY_COND: torch.stack([s[KEY_COND] for s in samples]),
        KEY_MASK: mask,
        KEY_PROGRESS_KNOWN: torch.stack([s[KEY_PROGRESS_KNOWN] for s in samples]),
    }

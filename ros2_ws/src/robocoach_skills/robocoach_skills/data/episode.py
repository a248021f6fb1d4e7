"""One recorded trajectory (a teleoperated/scripted demo or a policy rollout), in memory.

Frame t is observed, then action t is applied: `actions[t]` leads from frame t to frame t+1.
Everything a learner may read is in `images`, `proprio` and `actions`; `progress`,
`subtask_index` and `success` are ground truth from the simulator (or operator labels on hardware),
used for training the judge and for evaluation only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from robocoach_skills.composition import Composition

EPISODE_KINDS = ("demo", "rollout")


@dataclass
class Episode:
    composition: Composition  # what was attempted (a one-subtask composition for subtask demos)
    seed: int  # seed of the initial state it started from
    fps: float  # policy steps per second
    images: np.ndarray  # (T, H, W, 3) uint8 RGB
    proprio: np.ndarray  # (T, D) float32 joint positions [rad] + gripper opening [0..1]
    actions: np.ndarray  # (T, D) float32 joint-position targets [rad] + gripper command [0..1]
    subtask_index: np.ndarray  # (T,) int16 index of the active subtask at each frame
    progress: np.ndarray  # (T,) float32 ground-truth progress of the active subtask, 0..1
    success: bool  # every subtask completed
    kind: str = "demo"  # one of EPISODE_KINDS
    metadata: dict = field(default_factory=dict)  # free-form: operator, expert versions, failure info

    def __post_init__(self) -> None:
        if self.kind not in EPISODE_KINDS:
            raise ValueError(f"episode kind {self.kind!r} is not one of {EPISODE_KINDS}")
        n = len(self.images)
        for name in ("proprio", "actions", "subtask_index", "progress"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"episode {name} has {len(getattr(self, name))} steps, images have {n}")
        if self.images.ndim != 4 or self.images.shape[-1] != 3 or self.images.dtype != np.uint8:
            raise ValueError(
                f"images must be (T, H, W, 3) uint8, got {self.images.shape} {self.images.dtype}"
            )

    def __len__(self) -> int:
        return len(self.images)

    @property
    def robot(self) -> str:
        return self.composition.robot

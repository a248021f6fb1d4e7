"""Run an expert library step by step for the router: numpy observations in, native actions out.

The library predicts a chunk of K future actions; `n_action_steps` of each chunk are executed before
the next chunk is taken (1 = re-plan every step, K = open-loop chunks, as in ACT). Between chunks the
done probability is computed from the fresh observation, unless the router says nobody reads it
(`need_done`: the judge switches subtasks), which spares a vision pass per step. The first frame after each
`reset` (the router resets at every subtask switch) is the subtask's first frame, which the experts
read where the object was before the hand covered it (`ExpertConfig.argument_memory`): its keypoints
are computed once, then passed with every later call.

    policy = LibraryPolicy(library, versions={"pick": 3})
    action, done_prob = policy.act(obs, Subtask("pick", "red_cube"), "franka")  # (n_joints + 1,) numpy
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch

from robocoach_skills import action_contract
from robocoach_skills.composition import Subtask
from robocoach_skills.constants import (
    KEY_ARGUMENTS,
    KEY_ROBOT_ID,
    KEY_SUBTASK_START_KEYPOINTS,
    OBS_IMAGE,
    OBS_PROPRIO,
)
from robocoach_skills.experts.config import ExpertConfig
from robocoach_skills.experts.model import ChunkPolicy


@dataclass
class ChunkExecutionConfig:
    # Actions executed from each predicted chunk before the next one is taken. The whole chunk by
    # default: re-planning sooner re-reads a scene where the demos paused (a hover above a button)
    # and repeats the pause (piper two_buttons, oracle detector: 7/10 at 8 steps vs 1/6 at 4).
    n_action_steps: int = ExpertConfig.chunk_len

    def __post_init__(self) -> None:
        if self.n_action_steps < 1:
            raise ValueError(f"n_action_steps must be >= 1, got {self.n_action_steps}")


def observation_batch(
    observations: list[dict], robots: list[str], subtasks: list[Subtask], device: torch.device
) -> dict:
    """Numpy observations (image (H,W,3) uint8, native proprio) -> the library's padded tensor batch."""
    proprio = np.stack(
        [action_contract.pad(r, o[OBS_PROPRIO]) for o, r in zip(observations, robots, strict=True)]
    )
    return {
        OBS_IMAGE: _frames([o[OBS_IMAGE] for o in observations], device),
        OBS_PROPRIO: torch.from_numpy(proprio).to(device).float(),  # (B, ACTION_DIM)
        KEY_ROBOT_ID: torch.tensor([action_contract.robot_id(r) for r in robots], device=device),  # (B,)
        KEY_ARGUMENTS: torch.tensor([action_contract.argument_ids(s) for s in subtasks], device=device),
    }


def _frames(images: list[np.ndarray], device: torch.device) -> torch.Tensor:
    """(H, W, 3) uint8 frames -> (B, 3, H, W) float in [0, 1]."""
    return torch.from_numpy(np.stack(images)).to(device).permute(0, 3, 1, 2).float() / 255.0


class LibraryPolicy:
    """router.SkillPolicy over an expert library (or any baseline with the same interface)."""

    def __init__(
        self,
        library: ChunkPolicy,
        versions: Mapping[str, int] | None = None,
        config: ChunkExecutionConfig | None = None,
    ) -> None:
        library.eval()  # inference only, so no mode switch per call; a trainer switches it back
        self.library = library
        self.versions = dict(versions or {})
        self.config = config or ChunkExecutionConfig()
        self._queue: deque[np.ndarray] = deque()
        self._start: torch.Tensor | None = None  # keypoints of the current subtask's first frame (1, 2C)

    def skills(self) -> tuple[str, ...]:
        return self.library.skills

    def version(self, skill: str) -> int:
        return self.versions.get(skill, 0)

    def reset(self) -> None:
        self._queue.clear()
        self._start = None

    def act(
        self, obs: dict, subtask: Subtask, robot: str, need_done: bool = True
    ) -> tuple[np.ndarray, float]:
        if self._queue and not need_done:  # between chunks only the done head would run: nobody reads it
            return self._queue.popleft(), math.nan
        batch = observation_batch([obs], [robot], [subtask], self.library.device)
        if self.library.config.argument_memory:
            if self._start is None:
                self._start = self.library.start_keypoints(batch[OBS_IMAGE], subtask.skill)
            batch[KEY_SUBTASK_START_KEYPOINTS] = self._start
        if self._queue:
            done_prob = self.library.done_probability(batch, subtask.skill)  # (1,)
        else:
            chunk, done_prob = self.library.select_action(batch, subtask.skill)  # (1, K, ACTION_DIM), (1,)
            native = action_contract.unpad(robot, chunk[0].cpu().numpy())  # (K, native_dim)
            self._queue.extend(native[: self.config.n_action_steps])
        return self._queue.popleft(), float(done_prob[0])

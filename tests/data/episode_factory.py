"""Small random episodes for the data tests (imported by the tests and by writer_loop.py)."""

from __future__ import annotations

import numpy as np

from robocoach_skills.action_contract import native_dim
from robocoach_skills.composition import Composition, Subtask
from robocoach_skills.data.episode import Episode

FAILED_FINAL_PROGRESS = 0.9  # where a failed episode's last subtask stops


def make_episode(
    *,
    robot: str = "franka",
    skills: tuple[str, ...] = ("pick", "place"),
    steps: int = 12,
    size: int = 16,
    fps: float = 10.0,
    kind: str = "demo",
    success: bool = True,
    seed: int = 0,
    metadata: dict | None = None,
) -> Episode:
    """A `steps`-long episode with random frames and joints; the skills split the steps evenly, in order.

    Progress ramps to 1 within every segment, except the last one of a failed episode (stops at 0.9).
    """
    rng = np.random.default_rng(seed)
    dof = native_dim(robot)
    subtask_index = (np.arange(steps) * len(skills) // steps).astype(np.int16)
    progress = np.concatenate([np.linspace(0, 1, n) for n in np.bincount(subtask_index)]).astype(np.float32)
    if not success:
        progress[subtask_index == subtask_index[-1]] *= FAILED_FINAL_PROGRESS
    return Episode(
        composition=Composition("_".join(skills), robot, tuple(Subtask(s, "red_cube") for s in skills)),
        seed=seed,
        fps=fps,
        images=rng.integers(0, 256, (steps, size, size, 3), dtype=np.uint8),
        proprio=rng.standard_normal((steps, dof), dtype=np.float32),
        actions=rng.standard_normal((steps, dof), dtype=np.float32),
        subtask_index=subtask_index,
        progress=progress,
        success=success,
        kind=kind,
        metadata=metadata or {},
    )

"""The shape contract between recorded data, experts, and the world model, for both arms.

The Franka-like arm has 7 joints and the PiPER-like arm 6; both add one gripper channel. Learners
see one fixed width, ACTION_DIM = MAX_JOINTS + 1, with unused joint slots zero-filled and masked, so
one expert library and one world model serve both arms. The gripper is always the last channel.

>>> import numpy as np
>>> q = np.arange(7, dtype=np.float32)          # piper: 6 joints + gripper
>>> padded = pad("piper", q)
>>> padded.tolist()
[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 0.0, 6.0]
>>> unpad("piper", padded).tolist() == q.tolist()
True
>>> channel_mask("piper").tolist()
[True, True, True, True, True, True, False, True]
>>> argument_ids(Subtask("place", "red_cube", "bin"))
(1, 7)
"""

from __future__ import annotations

import numpy as np

from robocoach_skills.composition import Subtask
from robocoach_skills.constants import ROBOTS, SUBTASK_ARGUMENTS

JOINTS_PER_ROBOT: dict[str, int] = {"franka": 7, "piper": 6}
MAX_JOINTS = max(JOINTS_PER_ROBOT.values())
ACTION_DIM = MAX_JOINTS + 1  # joints + gripper; also the proprio width


def native_dim(robot: str) -> int:
    """Joints + gripper of one arm."""
    return _joints(robot) + 1


def _joints(robot: str) -> int:
    if robot not in JOINTS_PER_ROBOT:
        raise ValueError(f"unknown robot {robot!r}; known robots: {', '.join(ROBOTS)}")
    return JOINTS_PER_ROBOT[robot]


def robot_id(robot: str) -> int:
    """Index of the embodiment in ROBOTS (the one-hot/embedding id models receive)."""
    _joints(robot)
    return ROBOTS.index(robot)


def pad(robot: str, x: np.ndarray) -> np.ndarray:
    """(..., native_dim) -> (..., ACTION_DIM): joints first, zeros, gripper last."""
    n = _joints(robot)
    if x.shape[-1] != n + 1:
        raise ValueError(f"{robot} vectors have {n + 1} channels, got shape {x.shape}")
    out = np.zeros((*x.shape[:-1], ACTION_DIM), dtype=x.dtype)
    out[..., :n] = x[..., :n]
    out[..., -1] = x[..., -1]
    return out


def unpad(robot: str, x: np.ndarray) -> np.ndarray:
    """(..., ACTION_DIM) -> (..., native_dim); the inverse of `pad`."""
    n = _joints(robot)
    if x.shape[-1] != ACTION_DIM:
        raise ValueError(f"padded vectors have {ACTION_DIM} channels, got shape {x.shape}")
    return np.concatenate([x[..., :n], x[..., -1:]], axis=-1)


def channel_mask(robot: str) -> np.ndarray:
    """(ACTION_DIM,) bool: which padded channels are real for this arm."""
    mask = np.zeros(ACTION_DIM, dtype=bool)
    mask[: _joints(robot)] = True
    mask[-1] = True
    return mask


def argument_ids(subtask: Subtask) -> tuple[int, int]:
    """(object id, target id) of a subtask in SUBTASK_ARGUMENTS, the experts' conditioning input."""
    unknown = [a for a in (subtask.object, subtask.target) if a not in SUBTASK_ARGUMENTS]
    if unknown:
        known = ", ".join(SUBTASK_ARGUMENTS[1:])
        raise ValueError(f"subtask {subtask} names {unknown}, unknown to the experts; known: {known}")
    return SUBTASK_ARGUMENTS.index(subtask.object), SUBTASK_ARGUMENTS.index(subtask.target)

"""Conversions between robocoach_msgs / sensor_msgs and the plain-Python types the library uses.

Images are converted with numpy (no cv_bridge, which is not installable from PyPI). Only `rgb8` and
`bgr8` are accepted: anything else is a clear error rather than a silently wrong picture.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from sensor_msgs.msg import Image, JointState

from robocoach_msgs.msg import Subtask as SubtaskMsg
from robocoach_msgs.msg import TaskComposition
from robocoach_skills.action_contract import native_dim
from robocoach_skills.composition import Composition, Subtask
from robocoach_skills.constants import GRIPPER_JOINT

ENCODINGS = {"rgb8": False, "bgr8": True}  # encoding -> channels reversed


def image_to_msg(image: np.ndarray, stamp=None, frame_id: str = "") -> Image:
    """(H, W, 3) uint8 RGB -> sensor_msgs/Image rgb8."""
    if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
        raise ValueError(f"expected an (H, W, 3) uint8 image, got {image.shape} {image.dtype}")
    msg = Image(height=image.shape[0], width=image.shape[1], encoding="rgb8", is_bigendian=0)
    msg.step = image.shape[1] * 3
    msg.data = np.ascontiguousarray(image).tobytes()
    msg.header.frame_id = frame_id
    if stamp is not None:
        msg.header.stamp = stamp
    return msg


def msg_to_image(msg: Image) -> np.ndarray:
    """sensor_msgs/Image (rgb8 or bgr8, any row padding) -> (H, W, 3) uint8 RGB."""
    if msg.encoding not in ENCODINGS:
        raise ValueError(f"unsupported image encoding {msg.encoding!r}; expected one of {sorted(ENCODINGS)}")
    if msg.step < msg.width * 3 or len(msg.data) < msg.step * msg.height:
        raise ValueError(
            f"image buffer too small: {len(msg.data)} bytes for {msg.height}x{msg.width}, step {msg.step}"
        )
    rows = np.frombuffer(bytes(msg.data), dtype=np.uint8)[: msg.step * msg.height].reshape(
        msg.height, msg.step
    )
    image = rows[:, : msg.width * 3].reshape(msg.height, msg.width, 3)
    return np.ascontiguousarray(image[..., ::-1] if ENCODINGS[msg.encoding] else image)


def subtask_to_msg(subtask: Subtask) -> SubtaskMsg:
    names = [name for name, _ in subtask.params]
    values = [float(value) for _, value in subtask.params]
    return SubtaskMsg(
        skill=subtask.skill,
        object=subtask.object,
        target=subtask.target,
        parameter_names=names,
        parameter_values=values,
    )


def msg_to_subtask(msg: SubtaskMsg) -> Subtask:
    if len(msg.parameter_names) != len(msg.parameter_values):
        raise ValueError(
            f"subtask {msg.skill!r}: {len(msg.parameter_names)} parameter names "
            f"but {len(msg.parameter_values)} values"
        )
    params = tuple(sorted(zip(msg.parameter_names, (float(v) for v in msg.parameter_values), strict=True)))
    return Subtask(msg.skill, msg.object, msg.target, params)


def composition_to_msg(composition: Composition) -> TaskComposition:
    return TaskComposition(
        name=composition.name,
        robot=composition.robot,
        subtasks=[subtask_to_msg(s) for s in composition.subtasks],
        held_out=composition.held_out,
    )


def msg_to_composition(msg: TaskComposition) -> Composition:
    """Raises ValueError (unknown robot, no subtasks, malformed parameters) with the reason."""
    return Composition(msg.name, msg.robot, tuple(msg_to_subtask(s) for s in msg.subtasks), msg.held_out)


def joint_state_to_command(msg: JointState, joint_names: tuple[str, ...]) -> np.ndarray:
    """A joint command as JointState -> positions in `joint_names` order (+ gripper when given).

    With names, they may come in any order but must all be known, with the arm joints complete;
    without names, positions are taken in `joint_names` order. Values are not range-checked here.
    """
    positions = np.asarray(msg.position, dtype=np.float64)
    if not msg.name:
        return positions
    if len(msg.name) != len(positions):
        raise ValueError(f"command has {len(msg.name)} names but {len(positions)} positions")
    known = (*joint_names, GRIPPER_JOINT)
    unknown = sorted(set(msg.name) - set(known))
    if unknown:
        raise ValueError(f"command names unknown joints {unknown}; this arm has {list(known)}")
    missing = [n for n in joint_names if n not in msg.name]
    if missing:
        raise ValueError(f"command lacks joints {missing}")
    by_name = dict(zip(msg.name, positions, strict=True))
    return np.array([by_name[n] for n in known if n in by_name])


def joint_states_to_proprio(msgs: Sequence[JointState], robot: str) -> np.ndarray:
    """Joint states (positions: the arm's joints in order, then the gripper reading) -> (N, joints + 1)
    float32 proprio of `robot`; ValueError unless each holds that many finite positions."""
    width = native_dim(robot)
    if any(len(m.position) != width for m in msgs):
        raise ValueError(f"joint states must hold {width} finite positions for {robot}")
    proprio = np.array([m.position for m in msgs], dtype=np.float32).reshape(len(msgs), width)
    if not np.isfinite(proprio).all():
        raise ValueError(f"joint states must hold {width} finite positions for {robot} (NaN or infinite)")
    return proprio


def command_to_joint_state(command: np.ndarray, joint_names: tuple[str, ...], stamp=None) -> JointState:
    """Positions in `joint_names` order (+ gripper) -> a named JointState command."""
    names = [*joint_names, GRIPPER_JOINT][: len(command)]
    msg = JointState(name=names, position=[float(v) for v in command])
    if stamp is not None:
        msg.header.stamp = stamp
    return msg

"""The embodiment-agnostic action representation CoachWorld is conditioned on.

A padded joint-space vector of either arm (joint targets or joint positions + gripper, see
`robocoach_skills.action_contract`) becomes the pose of the tool centre point it puts the hand at,
plus the gripper value: (..., 3 + 6 + 1) = position [m], 6D rotation (the first two columns of the
rotation matrix, continuous unlike quaternions or Euler angles), gripper [0..1]. Two arms asking for
the same hand pose get the same vector, so one dynamics model serves both; the arm's identity
(`action_contract.robot_id`) travels separately as an embedding.

The forward kinematics is the arm's own MuJoCo kinematic tree (read from the scene model that
`sim/mjcf.py` builds: body offsets, joint axes, the TCP site), re-expressed as batched torch so it
costs microseconds for the 64 x K actions of one imagination step and runs on the model's device.

>>> kin = AgnosticKinematics()
>>> q = torch.zeros(2, ACTION_DIM)
>>> kin.encode(q, torch.tensor([0, 1])).shape
torch.Size([2, 10])
"""

from __future__ import annotations

from functools import cache

import mujoco
import numpy as np
import torch
from torch import nn

from robocoach_skills.action_contract import ACTION_DIM, JOINTS_PER_ROBOT
from robocoach_skills.constants import ROBOTS
from robocoach_skills.sim import mjcf
from robocoach_skills.sim.arms import get_arm
from robocoach_skills.sim.layout import get_layout

REPR_DIM = 3 + 6 + 1  # TCP position, 6D rotation, gripper


@cache
def scene_model(robot: str) -> mujoco.MjModel:
    """The MuJoCo scene model of `robot` (`sim/mjcf.py`): the one source of its kinematics and camera."""
    return mujoco.MjModel.from_xml_string(mjcf.build_scene_xml(get_arm(robot), get_layout(robot)))


def _quat_to_matrix(quat: np.ndarray) -> np.ndarray:
    mat = np.zeros(9)
    mujoco.mju_quat2Mat(mat, np.asarray(quat, dtype=np.float64))
    return mat.reshape(3, 3)


def _axis_rotation(axis: torch.Tensor, angle: torch.Tensor) -> torch.Tensor:
    """Rodrigues: (3,) unit axis, (N,) angles -> (N, 3, 3)."""
    x, y, z = axis
    zero = torch.zeros((), dtype=axis.dtype, device=axis.device)
    skew = torch.stack([torch.stack([zero, -z, y]), torch.stack([z, zero, -x]), torch.stack([-y, x, zero])])
    s, c = torch.sin(angle)[:, None, None], torch.cos(angle)[:, None, None]
    eye = torch.eye(3, dtype=axis.dtype, device=axis.device)
    return eye + s * skew + (1 - c) * (skew @ skew)


class ArmChain(nn.Module):
    """Batched torch FK of one arm's TCP site, extracted from its MuJoCo scene model.

    Each body from the world down to the hand contributes its fixed offset (pos, quat relative to
    its parent) and, if it carries one, the rotation of its hinge about `axis` through `anchor`.
    """

    def __init__(self, robot: str) -> None:
        super().__init__()
        arm = get_arm(robot)
        model = scene_model(robot)
        site = model.site(mjcf.TCP_SITE)
        bodies = []
        body = int(site.bodyid[0])
        while body != 0:
            bodies.append(body)
            body = int(model.body_parentid[body])
        bodies.reverse()
        joint_of_body = {int(model.jnt_bodyid[model.joint(n).id]): model.joint(n).id for n in arm.joint_names}
        if sorted(joint_of_body) != sorted(b for b in bodies if b in joint_of_body) or len(
            joint_of_body
        ) != len(arm.joint_names):
            raise ValueError(f"{robot}: arm joints are not all on the chain to the {mjcf.TCP_SITE!r} site")
        self.n_joints = len(arm.joint_names)
        self.joint_slot: list[int] = []  # per body: index into q of its hinge, -1 for a fixed body
        order = {model.joint(n).id: i for i, n in enumerate(arm.joint_names)}
        rot, pos, axis, anchor = [], [], [], []
        for b in bodies:
            rot.append(_quat_to_matrix(model.body_quat[b]))
            pos.append(model.body_pos[b])
            j = joint_of_body.get(b)
            self.joint_slot.append(-1 if j is None else order[j])
            axis.append(model.jnt_axis[j] if j is not None else np.zeros(3))
            anchor.append(model.jnt_pos[j] if j is not None else np.zeros(3))
        as_t = lambda a: torch.tensor(np.asarray(a), dtype=torch.float32)  # noqa: E731
        self.register_buffer("body_rot", as_t(rot), persistent=False)  # (nb, 3, 3)
        self.register_buffer("body_pos", as_t(pos), persistent=False)  # (nb, 3)
        self.register_buffer("axis", as_t(axis), persistent=False)  # (nb, 3)
        self.register_buffer("anchor", as_t(anchor), persistent=False)  # (nb, 3)
        self.register_buffer("site_rot", as_t(_quat_to_matrix(model.site_quat[site.id])), persistent=False)
        self.register_buffer("site_pos", as_t(model.site_pos[site.id]), persistent=False)

    def walk(self, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(N, n_joints) joint positions [rad] -> the origin of every body on the chain and the TCP (last)
        (N, n_bodies + 1, 3) [m], and the TCP rotation (N, 3, 3), world frame."""
        n = q.shape[0]
        rot = torch.eye(3, dtype=q.dtype, device=q.device).expand(n, 3, 3)
        pos = torch.zeros(n, 3, dtype=q.dtype, device=q.device)
        points = []
        for b, slot in enumerate(self.joint_slot):
            pos = pos + rot @ self.body_pos[b]
            rot = rot @ self.body_rot[b]
            if slot >= 0:  # hinge about `axis` through `anchor`: x -> anchor + R (x - anchor)
                hinge = _axis_rotation(self.axis[b], q[:, slot])
                pos = pos + (rot @ (self.anchor[b] - hinge @ self.anchor[b]).unsqueeze(-1)).squeeze(-1)
                rot = rot @ hinge
            points.append(pos)
        points.append(pos + rot @ self.site_pos)
        return torch.stack(points, dim=1), rot @ self.site_rot

    def forward(self, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(N, n_joints) joint positions [rad] -> TCP position (N, 3) [m], rotation (N, 3, 3), world frame."""
        points, rot = self.walk(q)
        return points[:, -1], rot


class AgnosticKinematics(nn.Module):
    """Padded joint vectors of any arm mix -> agnostic (..., REPR_DIM) vectors (module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.chains = nn.ModuleList(ArmChain(robot) for robot in ROBOTS)

        self.n_points = max(len(chain.joint_slot) + 1 for chain in self.chains)

    def walk(self, padded: torch.Tensor, robot_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(..., ACTION_DIM) padded vectors -> the chain's points (..., n_points, 3) (`ArmChain.walk`; an arm
        with fewer bodies repeats its TCP, so the last point is always the TCP), TCP rotation (..., 3, 3).

        `robot_ids` (long) covers the leading axes of `padded` or a prefix of them, e.g. (B,) for (B, K, 8).
        """
        if padded.shape[-1] != ACTION_DIM:
            raise ValueError(f"padded vectors have {ACTION_DIM} channels, got shape {tuple(padded.shape)}")
        lead = padded.shape[:-1]
        if robot_ids.shape != lead[: robot_ids.dim()]:
            raise ValueError(f"robot_ids shape {tuple(robot_ids.shape)} is not a prefix of {tuple(lead)}")
        if ((robot_ids < 0) | (robot_ids >= len(ROBOTS))).any():
            raise ValueError(f"robot ids must be in [0, {len(ROBOTS)}), got {robot_ids.unique().tolist()}")
        ids = (
            robot_ids.reshape(*robot_ids.shape, *[1] * (len(lead) - robot_ids.dim())).expand(lead).reshape(-1)
        )
        flat = padded.reshape(-1, ACTION_DIM)
        points = flat.new_zeros(flat.shape[0], self.n_points, 3)
        rot = flat.new_zeros(flat.shape[0], 3, 3)
        for rid, chain in enumerate(self.chains):
            rows = (ids == rid).nonzero(as_tuple=True)[0]
            if rows.numel():
                p, r = chain.walk(flat[rows, : JOINTS_PER_ROBOT[ROBOTS[rid]]])
                p = torch.cat([p, p[:, -1:].expand(-1, self.n_points - p.shape[1], -1)], dim=1)
                points, rot = points.index_copy(0, rows, p), rot.index_copy(0, rows, r)
        return points.reshape(*lead, self.n_points, 3), rot.reshape(*lead, 3, 3)

    def tcp_pose(self, padded: torch.Tensor, robot_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(..., ACTION_DIM) padded vectors -> TCP position (..., 3), rotation (..., 3, 3) (see `walk`)."""
        points, rot = self.walk(padded, robot_ids)
        return points[..., -1, :], rot

    def encode(self, padded: torch.Tensor, robot_ids: torch.Tensor) -> torch.Tensor:
        """(..., ACTION_DIM), (...) -> (..., REPR_DIM): TCP position, 6D rotation, gripper (last channel)."""
        pos, rot = self.tcp_pose(padded, robot_ids)
        six_d = rot[..., :, :2].transpose(-1, -2).reshape(*pos.shape[:-1], 6)  # columns x, y
        return torch.cat([pos, six_d, padded[..., -1:]], dim=-1)

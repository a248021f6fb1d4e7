"""Batched torch kinematics of both arms: forward kinematics of the hand, and top-down DLS IK.

The chains are each arm's own MuJoCo kinematic tree (read from the scene model that `sim/mjcf.py`
builds: body offsets, joint axes, joint limits, the TCP site), re-expressed as batched torch so the
64 x K actions of one imagination step cost one call on the model's device. Learners use it twice:
CoachWorld encodes actions as hand poses (`robocoach_world.world.action_repr`), and experts with
`action_space="ee"` predict hand motions that become joint targets through `solve_top_down`.

The hand pose of the experts is (x, y, z, yaw, gripper): the TCP position [m], the yaw of the
gripper's closing axis in the table plane [rad] (as `SimScene.privileged_state()["ee_yaw"]`), and
the gripper channel. It is all the scripted operator varies: every demo holds the hand top-down.

>>> kin = ArmKinematics()
>>> q = torch.zeros(2, ACTION_DIM)
>>> kin.hand_pose(q, torch.tensor([0, 1])).shape
torch.Size([2, 5])
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from functools import cache

import mujoco
import numpy as np
import torch
from torch import nn

from robocoach_skills.action_contract import ACTION_DIM
from robocoach_skills.constants import ROBOTS
from robocoach_skills.sim import mjcf
from robocoach_skills.sim.arms import get_arm
from robocoach_skills.sim.ik import IK_PITCH_WEIGHT, LIMIT_SLACK, IKConfig
from robocoach_skills.sim.layout import get_layout

HAND_POSE_DIM = 5  # x, y, z [m], closing-axis yaw [rad], gripper


@cache
def scene_model(robot: str) -> mujoco.MjModel:
    """The MuJoCo scene model of `robot` (`sim/mjcf.py`): the one source of its kinematics and camera."""
    return mujoco.MjModel.from_xml_string(mjcf.build_scene_xml(get_arm(robot), get_layout(robot)))


def _quat_to_matrix(quat: np.ndarray) -> np.ndarray:
    mat = np.zeros(9)
    mujoco.mju_quat2Mat(mat, np.asarray(quat, dtype=np.float64))
    return mat.reshape(3, 3)


def _skew(axis: np.ndarray) -> np.ndarray:
    """(3,) -> (3, 3) cross-product matrix: skew(a) @ v = a x v."""
    x, y, z = axis
    return np.array([[0.0, -z, y], [z, 0.0, -x], [-y, x, 0.0]])


def top_down(yaw: torch.Tensor) -> torch.Tensor:
    """(N,) closing-axis yaws -> (N, 3, 3) hand rotations pointing straight down (batched
    `sim.ik.top_down_rotation`)."""
    c, s = torch.cos(yaw), torch.sin(yaw)
    zero = torch.zeros_like(yaw)
    rows = [(-s, c, zero), (c, s, zero), (zero, zero, zero - 1)]
    return torch.stack([torch.stack(row, dim=-1) for row in rows], dim=-2)


def closing_axis_yaw(rot: torch.Tensor) -> torch.Tensor:
    """(..., 3, 3) hand rotations -> (...) yaw of their closing (y) axis in the table plane [rad]."""
    return torch.atan2(rot[..., 1, 1], rot[..., 0, 1])


def wrap(angle: torch.Tensor) -> torch.Tensor:
    """Angles to [-pi, pi)."""
    return torch.remainder(angle + torch.pi, 2 * torch.pi) - torch.pi


def orientation_error(current: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """(N, 3, 3) x 2 -> (N, 3) world-frame rotation vectors turning `current` towards `target`
    (batched `sim.ik.orientation_error`)."""
    skew = target @ current.transpose(1, 2) - current @ target.transpose(1, 2)
    return 0.5 * torch.stack([skew[:, 2, 1], skew[:, 0, 2], skew[:, 1, 0]], dim=-1)


class ArmChain(nn.Module):
    """Batched torch FK and DLS IK of one arm's TCP site, extracted from its MuJoCo scene model.

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
        self.robot = robot
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
        limits = np.array([model.jnt_range[model.joint(n).id] for n in arm.joint_names])  # (n_joints, 2)
        as_t = lambda a: torch.tensor(np.asarray(a), dtype=torch.float32)  # noqa: E731
        skew = np.stack([_skew(a) for a in axis])
        # Rodrigues about each hinge axis: R(angle) = I + sin(angle) skew + (1 - cos(angle)) skew^2.
        self.register_buffer("skew", as_t(skew), persistent=False)  # (nb, 3, 3)
        self.register_buffer("skew_sq", as_t(skew @ skew), persistent=False)  # (nb, 3, 3)
        self.register_buffer("eye", torch.eye(3), persistent=False)
        self.register_buffer("body_rot", as_t(rot), persistent=False)  # (nb, 3, 3)
        self.register_buffer("body_pos", as_t(pos), persistent=False)  # (nb, 3)
        self.register_buffer("axis", as_t(axis), persistent=False)  # (nb, 3)
        self.register_buffer("anchor", as_t(anchor), persistent=False)  # (nb, 3)
        self.register_buffer("site_rot", as_t(_quat_to_matrix(model.site_quat[site.id])), persistent=False)
        self.register_buffer("site_pos", as_t(model.site_pos[site.id]), persistent=False)
        self.register_buffer("lower", as_t(limits[:, 0]), persistent=False)  # (n_joints,) [rad]
        self.register_buffer("upper", as_t(limits[:, 1]), persistent=False)

    def _frames(self, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(N, n_joints) -> chain points (N, n_bodies + 1, 3), TCP rotation (N, 3, 3), and every hinge's
        world axis and anchor (N, n_joints, 3) each, in joint order."""
        n = q.shape[0]
        rot = self.eye.to(q.dtype).expand(n, 3, 3)
        pos = torch.zeros(n, 3, dtype=q.dtype, device=q.device)
        sin, cos = torch.sin(q)[:, :, None, None], torch.cos(q)[:, :, None, None]  # (N, n_joints, 1, 1)
        points, axes, anchors = [], [None] * self.n_joints, [None] * self.n_joints
        for b, slot in enumerate(self.joint_slot):
            pos = pos + rot @ self.body_pos[b]
            rot = rot @ self.body_rot[b]
            if slot >= 0:  # hinge about `axis` through `anchor`: x -> anchor + R (x - anchor)
                axes[slot], anchors[slot] = rot @ self.axis[b], pos + rot @ self.anchor[b]
                hinge = self.eye + sin[:, slot] * self.skew[b] + (1 - cos[:, slot]) * self.skew_sq[b]
                pos = pos + (rot @ (self.anchor[b] - hinge @ self.anchor[b]).unsqueeze(-1)).squeeze(-1)
                rot = rot @ hinge
            points.append(pos)
        points.append(pos + rot @ self.site_pos)
        return torch.stack(points, dim=1), rot @ self.site_rot, torch.stack(axes, 1), torch.stack(anchors, 1)

    def walk(self, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(N, n_joints) joint positions [rad] -> the origin of every body on the chain and the TCP (last)
        (N, n_bodies + 1, 3) [m], and the TCP rotation (N, 3, 3), world frame."""
        points, rot, _, _ = self._frames(q)
        return points, rot

    def forward(self, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(N, n_joints) joint positions [rad] -> TCP position (N, 3) [m], rotation (N, 3, 3), world frame."""
        points, rot = self.walk(q)
        return points[:, -1], rot

    def solve(self, pos: torch.Tensor, rot: torch.Tensor, q: torch.Tensor, config: IKConfig) -> torch.Tensor:
        """Joint positions (N, n_joints) within limits putting the TCP at `pos` (N, 3) with rotation `rot`
        (N, 3, 3), by damped least squares from `q` (N, n_joints); `sim.ik.IKSolver` batched.

        The same update as the MuJoCo solver (analytic hinge Jacobian, `config.pitch_weight` about the
        target's closing axis, steps capped at `max_step`, a null-space pull towards `q` on a redundant
        arm, joints at a limit that the update pushes further locked); it runs until every row converged.
        """
        q_rest = q
        closing = rot[:, :, 1:2]  # (N, 3, 1)
        weight = self.eye - (1.0 - config.pitch_weight) * closing @ closing.transpose(1, 2)  # (N, 3, 3)
        damping = config.damping * torch.eye(6, dtype=q.dtype, device=q.device)
        for _ in range(config.max_iters):
            points, now, axes, anchors = self._frames(q)
            tcp = points[:, -1]
            e_pos = pos - tcp
            e_rot = (weight @ orientation_error(now, rot).unsqueeze(-1)).squeeze(-1)
            if (e_pos.norm(dim=-1) < config.pos_tol).all() and (e_rot.norm(dim=-1) < config.rot_tol).all():
                break
            jac_pos = torch.linalg.cross(axes, tcp[:, None] - anchors).transpose(1, 2)  # (N, 3, n_joints)
            jac_rot = weight @ axes.transpose(1, 2)  # (N, 3, n_joints)
            jac = torch.cat([jac_pos, config.rot_weight * jac_rot], dim=1)  # (N, 6, n_joints)
            err = torch.cat([e_pos, config.rot_weight * e_rot], dim=-1).unsqueeze(-1)  # (N, 6, 1)
            free = torch.ones_like(q, dtype=torch.bool)
            for _ in range(self.n_joints):  # lock joints pushed past a limit; the others compensate
                masked = jac * free[:, None, :]
                pinv = masked.transpose(1, 2) @ torch.linalg.inv(masked @ masked.transpose(1, 2) + damping)
                dq = (pinv @ err).squeeze(-1)  # (N, n_joints)
                if self.n_joints > 6:
                    null = torch.diag_embed(free.to(q.dtype)) - pinv @ masked
                    pull = config.nullspace_gain * (q_rest - q) * free
                    dq = dq + (null @ pull.unsqueeze(-1)).squeeze(-1)
                at_lower, at_upper = q <= self.lower + LIMIT_SLACK, q >= self.upper - LIMIT_SLACK
                pushing = free & ((at_lower & (dq < 0)) | (at_upper & (dq > 0)))
                if not pushing.any():
                    break
                free = free & ~pushing
            dq = dq * free
            largest = dq.abs().amax(dim=-1, keepdim=True).clamp_min(1e-12)
            dq = dq * (config.max_step / largest).clamp(max=1.0)
            q = torch.minimum(torch.maximum(q + dq, self.lower), self.upper)
        return q


class ArmKinematics(nn.Module):
    """Padded joint vectors of any arm mix -> TCP poses and hand poses, and hand poses -> joint targets."""

    def __init__(self) -> None:
        super().__init__()
        self.chains = nn.ModuleList(ArmChain(robot) for robot in ROBOTS)
        self.n_points = max(len(chain.joint_slot) + 1 for chain in self.chains)

    def _rows(self, padded: torch.Tensor, robot_ids: torch.Tensor) -> torch.Tensor:
        """Checks; (...) robot ids broadcast over the leading axes of `padded` (...) and flattened."""
        if padded.shape[-1] != ACTION_DIM:
            raise ValueError(f"padded vectors have {ACTION_DIM} channels, got shape {tuple(padded.shape)}")
        lead = padded.shape[:-1]
        if robot_ids.shape != lead[: robot_ids.dim()]:
            raise ValueError(f"robot_ids shape {tuple(robot_ids.shape)} is not a prefix of {tuple(lead)}")
        if ((robot_ids < 0) | (robot_ids >= len(ROBOTS))).any():
            raise ValueError(f"robot ids must be in [0, {len(ROBOTS)}), got {robot_ids.unique().tolist()}")
        ids = robot_ids.reshape(*robot_ids.shape, *[1] * (len(lead) - robot_ids.dim()))
        return ids.expand(lead).reshape(-1)

    def _by_arm(self, ids: torch.Tensor) -> Iterator[tuple[ArmChain, torch.Tensor]]:
        """(chain, indices of its rows) for every arm with rows in the flat `ids`."""
        for rid, chain in enumerate(self.chains):
            rows = (ids == rid).nonzero(as_tuple=True)[0]
            if rows.numel():
                yield chain, rows

    def walk(self, padded: torch.Tensor, robot_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(..., ACTION_DIM) padded vectors -> the chain's points (..., n_points, 3) (`ArmChain.walk`; an arm
        with fewer bodies repeats its TCP, so the last point is always the TCP), TCP rotation (..., 3, 3).

        `robot_ids` (long) covers the leading axes of `padded` or a prefix of them, e.g. (B,) for (B, K, 8).
        """
        ids = self._rows(padded, robot_ids)
        lead = padded.shape[:-1]
        flat = padded.reshape(-1, ACTION_DIM)
        points = flat.new_zeros(flat.shape[0], self.n_points, 3)
        rot = flat.new_zeros(flat.shape[0], 3, 3)
        for chain, rows in self._by_arm(ids):
            p, r = chain.walk(flat[rows, : chain.n_joints])
            p = torch.cat([p, p[:, -1:].expand(-1, self.n_points - p.shape[1], -1)], dim=1)
            points, rot = points.index_copy(0, rows, p), rot.index_copy(0, rows, r)
        return points.reshape(*lead, self.n_points, 3), rot.reshape(*lead, 3, 3)

    def tcp_pose(self, padded: torch.Tensor, robot_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(..., ACTION_DIM) padded vectors -> TCP position (..., 3), rotation (..., 3, 3) (see `walk`)."""
        points, rot = self.walk(padded, robot_ids)
        return points[..., -1, :], rot

    def hand_pose(self, padded: torch.Tensor, robot_ids: torch.Tensor) -> torch.Tensor:
        """(..., ACTION_DIM) padded vectors -> (..., HAND_POSE_DIM) hand poses (module docstring)."""
        pos, rot = self.tcp_pose(padded, robot_ids)
        return torch.cat([pos, closing_axis_yaw(rot)[..., None], padded[..., -1:]], dim=-1)

    def solve_top_down(
        self, hand: torch.Tensor, start: torch.Tensor, robot_ids: torch.Tensor, config: IKConfig
    ) -> torch.Tensor:
        """(..., HAND_POSE_DIM) hand poses, (..., ACTION_DIM) padded joint vectors to start from -> padded
        joint targets reaching them top-down (padded slots 0, gripper copied), within joint limits.

        Each arm uses its own `IK_PITCH_WEIGHT`; the rest of `config` is shared.
        """
        if hand.shape[-1] != HAND_POSE_DIM or hand.shape[:-1] != start.shape[:-1]:
            raise ValueError(f"hand poses (..., {HAND_POSE_DIM}) must match start {tuple(start.shape)}")
        ids = self._rows(start, robot_ids)
        lead = start.shape[:-1]
        flat_hand, flat_start = hand.reshape(-1, HAND_POSE_DIM), start.reshape(-1, ACTION_DIM)
        out = torch.zeros_like(flat_start)
        out[:, -1] = flat_hand[:, -1]
        for chain, rows in self._by_arm(ids):
            arm_config = dataclasses.replace(config, pitch_weight=IK_PITCH_WEIGHT[chain.robot])
            goal, q = flat_hand[rows], flat_start[rows, : chain.n_joints]
            out[rows, : chain.n_joints] = chain.solve(goal[:, :3], top_down(goal[:, 3]), q, arm_config)
        return out.reshape(*lead, ACTION_DIM)

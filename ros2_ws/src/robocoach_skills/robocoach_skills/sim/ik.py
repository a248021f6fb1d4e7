"""Damped least-squares inverse kinematics on the MuJoCo model (site Jacobian, joint limits kept).

The solver works on its own `MjData`, so asking for a solution never disturbs the simulation. For
the 7-DoF Franka the redundancy is resolved by a null-space pull towards a rest posture (the
previous solution by default), which keeps successive solutions close and the elbow where it was.

Typical use (the scripted operator): each policy step, solve for the next Cartesian set-point
starting from the last joint target; a few iterations suffice because set-points move little.
"""

from __future__ import annotations

from dataclasses import dataclass

import mujoco
import numpy as np

# How much the IK may let the gripper pitch about its closing axis (see IKConfig.pitch_weight):
# the PiPER's +-70 deg J5 cannot keep the hand vertical above ~0.1 m; the Franka can.
IK_PITCH_WEIGHT: dict[str, float] = {"franka": 1.0, "piper": 0.1}
LIMIT_SLACK = 1e-6  # a joint this close to a limit counts as at it [rad]


@dataclass(frozen=True)
class IKConfig:
    """Solver settings."""

    damping: float = 1e-3  # Levenberg-Marquardt damping lambda^2 added to J J^T
    max_iters: int = 60  # iterations per solve
    pos_tol: float = 5e-4  # stop when the position error is below this [m]
    rot_tol: float = 5e-3  # ... and the orientation error below this [rad]
    rot_weight: float = 0.3  # metres of position error one radian of orientation error is worth
    max_step: float = 0.25  # largest joint change per iteration [rad], keeps updates in the linear regime
    nullspace_gain: float = 0.05  # pull towards the rest posture (redundant arms only)
    # Weight of the rotation about the target's y axis (the gripper closing axis). Below 1 the
    # gripper may pitch about that axis, which a 6-DoF wrist with a +-70 deg joint (PiPER J5)
    # needs to point down above low heights; a grasp is unaffected by that pitch.
    pitch_weight: float = 1.0

    def __post_init__(self) -> None:
        for name in ("damping", "pos_tol", "rot_tol", "rot_weight", "max_step", "pitch_weight"):
            if getattr(self, name) <= 0:
                raise ValueError(f"IKConfig.{name} must be positive, got {getattr(self, name)}")
        if self.max_iters < 1:
            raise ValueError(f"IKConfig.max_iters must be >= 1, got {self.max_iters}")


@dataclass(frozen=True)
class IKResult:
    q: np.ndarray  # (n,) joint positions within limits [rad]
    pos_error: float  # remaining position error [m]
    rot_error: float  # remaining orientation error [rad]
    converged: bool


def orientation_error(current: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Rotation vector (world frame) that turns `current` towards `target` (3x3 matrices).

    Equals 0.5 * sum_i current[:, i] x target[:, i], written as the skew part of T C^T.
    """
    skew = target @ current.T - current @ target.T
    return 0.5 * np.array([skew[2, 1], skew[0, 2], skew[1, 0]])


class IKSolver:
    """DLS IK for one site, over the given hinge joints of a model."""

    def __init__(
        self, model: mujoco.MjModel, joint_names: tuple[str, ...], site: str, config: IKConfig | None = None
    ):
        self.model = model
        self.data = mujoco.MjData(model)
        self.config = config or IKConfig()
        self.site_id = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SITE, site)
        if self.site_id < 0:
            raise ValueError(f"model has no site {site!r}")
        joint_ids = [model.joint(n).id for n in joint_names]
        self.qpos_adr = np.array([model.jnt_qposadr[j] for j in joint_ids])
        self.dof_adr = np.array([model.jnt_dofadr[j] for j in joint_ids])
        self.lower = model.jnt_range[joint_ids, 0].copy()
        self.upper = model.jnt_range[joint_ids, 1].copy()
        self._jacp = np.zeros((3, model.nv))
        self._jacr = np.zeros((3, model.nv))

    def _step(self, jac: np.ndarray, err: np.ndarray, q: np.ndarray, q_rest: np.ndarray) -> np.ndarray:
        """One DLS update; joints at a limit that the update would push further are locked
        (their Jacobian column removed) and the update recomputed, so the others compensate."""
        cfg = self.config
        free = np.ones(q.size, dtype=bool)
        for _ in range(q.size):
            j = jac * free
            dq = j.T @ np.linalg.solve(j @ j.T + cfg.damping * np.eye(j.shape[0]), err)
            if free.sum() > j.shape[0]:
                null = np.diag(free.astype(float)) - np.linalg.pinv(j) @ j
                dq += null @ (cfg.nullspace_gain * (q_rest - q) * free)
            at_lower, at_upper = q <= self.lower + LIMIT_SLACK, q >= self.upper - LIMIT_SLACK
            pushing = free & ((at_lower & (dq < 0)) | (at_upper & (dq > 0)))
            if not pushing.any():
                break
            free &= ~pushing
        return dq * free

    def forward(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Site position (3,) and rotation matrix (3, 3) at joint positions q."""
        self.data.qpos[self.qpos_adr] = q
        mujoco.mj_kinematics(self.model, self.data)
        return self.data.site_xpos[self.site_id].copy(), self.data.site_xmat[self.site_id].reshape(
            3, 3
        ).copy()

    def solve(
        self,
        target_pos: np.ndarray,
        target_rot: np.ndarray | None,
        q_init: np.ndarray,
        q_rest: np.ndarray | None = None,
    ) -> IKResult:
        """Joint positions putting the site at `target_pos` (and `target_rot` if given)."""
        cfg = self.config
        q = np.clip(np.asarray(q_init, dtype=np.float64).copy(), self.lower, self.upper)
        q_rest = q.copy() if q_rest is None else np.asarray(q_rest, dtype=np.float64)
        pos_err = rot_err = np.inf
        weight = np.eye(3)
        if target_rot is not None:
            axis = np.asarray(target_rot)[:, 1]
            weight -= (1.0 - cfg.pitch_weight) * np.outer(axis, axis)
        for _ in range(cfg.max_iters):
            pos, rot = self.forward(q)
            e_pos = np.asarray(target_pos) - pos
            e_rot = weight @ orientation_error(rot, target_rot) if target_rot is not None else np.zeros(3)
            pos_err, rot_err = float(np.linalg.norm(e_pos)), float(np.linalg.norm(e_rot))
            if pos_err < cfg.pos_tol and (target_rot is None or rot_err < cfg.rot_tol):
                break
            mujoco.mj_comPos(self.model, self.data)
            mujoco.mj_jacSite(self.model, self.data, self._jacp, self._jacr, self.site_id)
            if target_rot is None:
                jac, err = self._jacp[:, self.dof_adr], e_pos
            else:
                jacr = weight @ self._jacr[:, self.dof_adr]
                jac = np.vstack([self._jacp[:, self.dof_adr], cfg.rot_weight * jacr])
                err = np.concatenate([e_pos, cfg.rot_weight * e_rot])
            dq = self._step(jac, err, q, q_rest)
            largest = np.max(np.abs(dq))
            if largest > cfg.max_step:
                dq *= cfg.max_step / largest
            q = np.clip(q + dq, self.lower, self.upper)
        converged = pos_err < cfg.pos_tol * 4 and (target_rot is None or rot_err < cfg.rot_tol * 4)
        return IKResult(q=q, pos_error=pos_err, rot_error=rot_err, converged=converged)


def top_down_rotation(yaw: float) -> np.ndarray:
    """Gripper orientation pointing straight down with its closing axis at `yaw` in the table plane.

    Columns are the gripper's x, y (closing direction) and z (approach) axes in the world frame.
    """
    c, s = np.cos(yaw), np.sin(yaw)
    return np.array([[-s, c, 0.0], [c, s, 0.0], [0.0, 0.0, -1.0]])

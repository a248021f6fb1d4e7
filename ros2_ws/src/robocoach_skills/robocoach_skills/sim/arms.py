"""Kinematic and limit data of the two embedded arms, and the pure joint-command checks.

Both arms are described by their manufacturers' modified Denavit-Hartenberg tables (Craig's
convention: a frame i is reached from frame i-1 by RotX(alpha), TransX(a), RotZ(theta + offset),
TransZ(d)), their joint limits and their grippers. `mjcf.py` builds the MuJoCo bodies straight from
these rows, so the simulated forward kinematics are the published ones.

The ROS node refuses commands with `check_joint_command`; the scene clips what it applies with
`clip_joint_command`, so the physics never receives an out-of-limit target.

>>> arm = get_arm("piper")
>>> arm.n_joints
6
>>> check_joint_command(arm, arm.home, arm.home, 0.1) is None
True
>>> check_joint_command(arm, [0.0] * 5, arm.home, 0.1)
'command has 5 values; piper takes 6 joint positions (optionally + 1 gripper command)'
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# Slack when comparing a command with a limit [rad]: a target exactly on a limit passes even
# after a float32 round trip (resolution ~2.4e-7 rad near pi).
LIMIT_TOLERANCE = 1e-6


@dataclass(frozen=True)
class MdhRow:
    """One row of a modified (Craig) DH table, metres and radians."""

    a: float  # link length along the previous x axis [m]
    alpha: float  # link twist about the previous x axis [rad]
    d: float  # link offset along the new z axis [m]
    theta_offset: float = 0.0  # constant added to the joint angle [rad]


@dataclass(frozen=True)
class GripperSpec:
    """A parallel two-finger gripper, symmetric about the tool axis."""

    stroke: float  # full opening between the fingers [m]
    tcp_offset: float  # flange -> grasp centre between the fingertips, along the tool axis [m]
    finger_length: float  # length of a finger along the tool axis [m]
    finger_width: float  # finger extent across the closing direction [m]
    finger_thickness: float  # finger extent along the closing direction [m]
    max_force: float  # continuous grasp force per finger the simulation allows [N]
    palm_size: tuple[float, float]  # palm box full extents across (x) and along (y) the closing axis [m]
    tip_margin: float = 0.01  # fingertips reach this far beyond the grasp centre [m]


@dataclass(frozen=True)
class ArmSpec:
    """Everything the simulation needs to know about one arm."""

    name: str  # robot name, one of robocoach_skills.constants.ROBOTS
    joint_names: tuple[str, ...]  # arm joints, base to wrist
    mdh: tuple[MdhRow, ...]  # one modified-DH row per joint
    flange_offset: float  # last DH frame -> flange, along its z axis [m]
    hand_yaw: float  # rotation of the hand about the flange z axis [rad]
    lower: tuple[float, ...]  # joint position lower limits [rad]
    upper: tuple[float, ...]  # joint position upper limits [rad]
    velocity: tuple[float, ...]  # joint velocity limits [rad/s]
    effort: tuple[float, ...]  # joint torque limits [N m]
    home: tuple[float, ...]  # ready pose, gripper pointing down over the workspace [rad]
    gripper: GripperSpec
    link_radius: tuple[float, ...]  # capsule radius drawn for each link body (joint i) [m]
    link_mass: tuple[float, ...]  # mass of each link body [kg]
    base_radius: float  # radius of the base cylinder [m]
    # Simulation tuning, not manufacturer data: position-servo gains of the joint actuators.
    kp: tuple[float, ...]  # stiffness [N m/rad]
    kv: tuple[float, ...]  # damping [N m s/rad]

    def __post_init__(self) -> None:
        n = len(self.joint_names)
        per_joint = (
            "mdh",
            "lower",
            "upper",
            "velocity",
            "effort",
            "home",
            "link_radius",
            "link_mass",
            "kp",
            "kv",
        )
        for name in per_joint:
            if len(getattr(self, name)) != n:
                raise ValueError(f"{self.name}: {name} has {len(getattr(self, name))} entries, expected {n}")
        for j, (lo, hi, q) in enumerate(zip(self.lower, self.upper, self.home, strict=True)):
            if not lo <= q <= hi:
                raise ValueError(f"{self.name}: home {q} of {self.joint_names[j]} outside [{lo}, {hi}]")

    @property
    def n_joints(self) -> int:
        return len(self.joint_names)

    @property
    def action_dim(self) -> int:
        """Joint-position targets plus one gripper command."""
        return self.n_joints + 1

    @property
    def lower_array(self) -> np.ndarray:
        return np.asarray(self.lower, dtype=np.float64)

    @property
    def upper_array(self) -> np.ndarray:
        return np.asarray(self.upper, dtype=np.float64)

    @property
    def velocity_array(self) -> np.ndarray:
        return np.asarray(self.velocity, dtype=np.float64)


# --------------------------------------------------------------------------------------------
# Franka Research 3 / Panda.
# DH table: Franka's "Robot and interface specifications" (frankaemika.github.io/docs/
# control_parameters.html), identical for Panda and FR3: a = 0, 0, 0, 0.0825, -0.0825, 0, 0.088;
# d = 0.333, 0, 0.316, 0, 0.384, 0, 0; alpha = 0, -pi/2, pi/2, pi/2, -pi/2, pi/2, pi/2;
# flange d = 0.107. Franka Hand: TCP 0.1034 m beyond the flange, rotated -pi/4 about z,
# 80 mm stroke, 70 N continuous force (Franka Hand data sheet).
# Limits: Panda column of the same page (also libfranka's and franka_description's values):
# q_min = -2.8973, -1.7628, -2.8973, -3.0718, -2.8973, -0.0175, -2.8973;
# q_max =  2.8973,  1.7628,  2.8973, -0.0698,  2.8973,  3.7525,  2.8973;
# dq_max = 2.1750 x4, 2.6100 x3 rad/s; tau_max = 87 x4, 12 x3 N m.
# (FR3 differs slightly: e.g. q4 in [-3.0421, -0.1518], q6 in [0.5445, 4.5169]; the Panda set
# is used because franka_ros2's panda description and most datasets use it.)
# Home: Franka's documented ready pose [0, -pi/4, 0, -3pi/4, 0, pi/2, pi/4].
# Link masses: franka_description inertials (link1..link7), rounded.
# --------------------------------------------------------------------------------------------
FRANKA = ArmSpec(
    name="franka",
    joint_names=tuple(f"fr3_joint{i}" for i in range(1, 8)),
    mdh=(
        MdhRow(0.0, 0.0, 0.333),
        MdhRow(0.0, -math.pi / 2, 0.0),
        MdhRow(0.0, math.pi / 2, 0.316),
        MdhRow(0.0825, math.pi / 2, 0.0),
        MdhRow(-0.0825, -math.pi / 2, 0.384),
        MdhRow(0.0, math.pi / 2, 0.0),
        MdhRow(0.088, math.pi / 2, 0.0),
    ),
    flange_offset=0.107,
    hand_yaw=-math.pi / 4,
    lower=(-2.8973, -1.7628, -2.8973, -3.0718, -2.8973, -0.0175, -2.8973),
    upper=(2.8973, 1.7628, 2.8973, -0.0698, 2.8973, 3.7525, 2.8973),
    velocity=(2.1750, 2.1750, 2.1750, 2.1750, 2.6100, 2.6100, 2.6100),
    effort=(87.0, 87.0, 87.0, 87.0, 12.0, 12.0, 12.0),
    home=(0.0, -math.pi / 4, 0.0, -3 * math.pi / 4, 0.0, math.pi / 2, math.pi / 4),
    gripper=GripperSpec(
        stroke=0.08,
        tcp_offset=0.1034,
        finger_length=0.054,
        finger_width=0.02,
        finger_thickness=0.012,
        max_force=35.0,
        palm_size=(0.04, 0.20),
    ),
    link_radius=(0.06, 0.06, 0.055, 0.055, 0.05, 0.045, 0.04),
    link_mass=(4.97, 0.65, 3.23, 3.59, 1.23, 1.67, 0.74),
    base_radius=0.09,
    kp=(1500.0, 1500.0, 1200.0, 1200.0, 400.0, 400.0, 200.0),
    kv=(150.0, 150.0, 120.0, 120.0, 40.0, 40.0, 20.0),
)

# --------------------------------------------------------------------------------------------
# AgileX PiPER.
# DH table: AgileX piper_sdk (piper_sdk/kinematics/piper_fk.py and piper_param/constants.py,
# ROBOT_MDH_PRESET["piper"], firmware >= S-V1.6-3): a = 0, 0, 0.28503, -0.02198, 0, 0;
# alpha = 0, -pi/2, 0, pi/2, -pi/2, pi/2; d = 0.123, 0, 0, 0.25075, 0, 0.091;
# theta offsets 0, -172.22 deg, -102.78 deg, 0, 0, 0 (joint zero = folded rest pose).
# Limits: piper_sdk C_PiperParamManager / ROBOT_JOINT_LIMIT_PRESET_RAD["piper"] (= PiPER user
# manual ranges): J1 +-150 deg, J2 [0, 180] deg, J3 [-170, 0] deg, J4 +-100 deg, J5 +-70 deg,
# J6 +-120 deg. Velocity and effort: AgileX piper_description URDF (5 rad/s, J6 3 rad/s;
# effort 100 is a placeholder there, so the torques below are the sim's own choice).
# Gripper: piper_sdk gripper_range [0, 0.07] m; fingers 0.1358 m beyond the flange
# (piper_description joint7/joint8 origin). Link masses: piper_description inertials.
# Home is not published: it is a ready pose chosen here (gripper down, ~0.25 m in front).
# --------------------------------------------------------------------------------------------
PIPER = ArmSpec(
    name="piper",
    joint_names=tuple(f"piper_joint{i}" for i in range(1, 7)),
    mdh=(
        MdhRow(0.0, 0.0, 0.123),
        MdhRow(0.0, -math.pi / 2, 0.0, math.radians(-172.22)),
        MdhRow(0.28503, 0.0, 0.0, math.radians(-102.78)),
        MdhRow(-0.02198, math.pi / 2, 0.25075),
        MdhRow(0.0, -math.pi / 2, 0.0),
        MdhRow(0.0, math.pi / 2, 0.091),
    ),
    flange_offset=0.0,
    hand_yaw=0.0,
    lower=(-2.6179, 0.0, -2.967, -1.745, -1.22, -2.0944),
    upper=(2.6179, 3.14, 0.0, 1.745, 1.22, 2.0944),
    velocity=(5.0, 5.0, 5.0, 5.0, 5.0, 3.0),
    effort=(40.0, 40.0, 40.0, 10.0, 10.0, 10.0),
    home=(0.0, 1.31, -0.81, 0.0, 1.17, 0.0),
    gripper=GripperSpec(
        stroke=0.07,
        tcp_offset=0.1358,
        finger_length=0.05,
        finger_width=0.02,
        finger_thickness=0.01,
        max_force=20.0,
        palm_size=(0.04, 0.12),
    ),
    link_radius=(0.045, 0.04, 0.035, 0.03, 0.03, 0.03),
    link_mass=(0.71, 1.17, 0.5, 0.38, 0.383, 0.007),
    base_radius=0.05,
    kp=(300.0, 300.0, 300.0, 60.0, 60.0, 30.0),
    kv=(30.0, 30.0, 30.0, 6.0, 6.0, 3.0),
)

ARMS: dict[str, ArmSpec] = {arm.name: arm for arm in (FRANKA, PIPER)}


def get_arm(robot: str) -> ArmSpec:
    """The ArmSpec of a robot name; raises ValueError listing the known names."""
    try:
        return ARMS[robot]
    except KeyError:
        raise ValueError(f"unknown robot {robot!r}; known robots: {', '.join(ARMS)}") from None


def _split_command(arm: ArmSpec, command) -> tuple[np.ndarray, float | None, str | None]:
    """Split a command into (joint targets, gripper or None, reason-if-malformed)."""
    q = np.asarray(command, dtype=np.float64).reshape(-1)
    if q.size not in (arm.n_joints, arm.action_dim):
        return (
            q,
            None,
            f"command has {q.size} values; {arm.name} takes {arm.n_joints} joint positions "
            f"(optionally + 1 gripper command)",
        )
    if not np.all(np.isfinite(q)):
        bad = [i for i in range(q.size) if not math.isfinite(q[i])]
        return q, None, f"command has non-finite values at indices {bad}"
    gripper = float(q[arm.n_joints]) if q.size == arm.action_dim else None
    return q[: arm.n_joints], gripper, None


def check_joint_command(arm: ArmSpec, q_target, q_current, dt: float) -> str | None:
    """Why a joint command must be refused, or None if it is acceptable.

    `q_target` holds the arm's joint positions [rad], optionally followed by a gripper command in
    [0, 1]; `q_current` the measured joint positions; `dt` the time the move may take [s].
    Checks, in order: length, finite values, gripper range, position limits, velocity limits.
    """
    q, gripper, reason = _split_command(arm, q_target)
    if reason:
        return reason
    if gripper is not None and not 0.0 <= gripper <= 1.0:
        return f"gripper command {gripper:.4g} outside [0, 1]"
    for j, name in enumerate(arm.joint_names):
        if not arm.lower[j] - LIMIT_TOLERANCE <= q[j] <= arm.upper[j] + LIMIT_TOLERANCE:
            return f"{name} target {q[j]:.4f} rad outside limits [{arm.lower[j]:.4f}, {arm.upper[j]:.4f}]"
    if dt <= 0:
        return f"dt must be positive, got {dt}"
    current = np.asarray(q_current, dtype=np.float64).reshape(-1)
    if current.size != arm.n_joints:
        return f"current state has {current.size} joint positions, expected {arm.n_joints}"
    move = np.abs(q - current)
    for j, name in enumerate(arm.joint_names):
        if move[j] > arm.velocity[j] * dt + LIMIT_TOLERANCE:
            return (
                f"{name} would move {move[j]:.4f} rad in {dt:.3g} s "
                f"({move[j] / dt:.3f} rad/s > limit {arm.velocity[j]:.3f} rad/s)"
            )
    return None


def clip_joint_command(arm: ArmSpec, q_target, q_current, dt: float) -> np.ndarray:
    """The command made safe: joints clipped to the per-step velocity bound and position limits.

    Same layout as `q_target` (joints, optionally + gripper clipped to [0, 1]). Malformed commands
    (wrong length, NaN) cannot be clipped and raise ValueError with the reason.

    >>> arm = get_arm("franka")
    >>> q = clip_joint_command(arm, [9.0] * 7, arm.home, 0.1)
    >>> bool(abs(q[0] - (arm.home[0] + 0.2175)) < 1e-9)
    True
    """
    q, gripper, reason = _split_command(arm, q_target)
    if reason:
        raise ValueError(reason)
    q = _clip_joints(arm, q, np.asarray(q_current, dtype=np.float64).reshape(-1), dt)
    if gripper is None:
        return q
    return np.append(q, np.clip(gripper, 0.0, 1.0))


def clip_joint_commands(arm: ArmSpec, actions, q_current, dt: float) -> np.ndarray:
    """`clip_joint_command` of every row: actions (N, action_dim), measured positions (N, n_joints).

    For commands that never reach a robot but must move as if they had (imagination: CoachWorld was
    trained on the actions robots applied). A non-finite value raises ValueError naming its rows.
    """
    a = np.asarray(actions, dtype=np.float64)
    current = np.asarray(q_current, dtype=np.float64)
    if a.ndim != 2 or a.shape[1] != arm.action_dim or current.shape != (len(a), arm.n_joints):
        raise ValueError(
            f"{arm.name} commands must be (N, {arm.action_dim}) with positions (N, {arm.n_joints}), "
            f"got {a.shape} and {current.shape}"
        )
    bad = ~np.isfinite(a).all(axis=1)
    if bad.any():
        raise ValueError(f"commands have non-finite values in rows {np.flatnonzero(bad).tolist()}")
    q = _clip_joints(arm, a[:, : arm.n_joints], current, dt)
    return np.concatenate([q, np.clip(a[:, arm.n_joints :], 0.0, 1.0)], axis=1)


def _clip_joints(arm: ArmSpec, q: np.ndarray, current: np.ndarray, dt: float) -> np.ndarray:
    """Joint targets (..., n_joints) within one step of `current` at the velocity limits, and within the
    position limits."""
    if dt <= 0:
        raise ValueError(f"dt must be positive, got {dt}")
    step = arm.velocity_array * dt
    q = np.clip(q, current - step, current + step)
    return np.clip(q, arm.lower_array, arm.upper_array)

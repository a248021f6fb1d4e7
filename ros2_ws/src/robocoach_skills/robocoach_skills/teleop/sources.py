"""Teleoperation sources: what the operator's device says the arm should do at the next policy step.

Every source ends in the same action as a policy's: `n_joints` joint targets [rad] + a gripper
command in [0, 1] (1 = open), which the robot interface then clips like any other action.

- keyboard and spacemouse move an end-effector set-point (Cartesian displacement + wrist yaw);
  `CartesianDriver` turns it into joint targets with the DLS IK of `sim/ik.py` on the arm's kinematic
  model (the MJCF the sim uses; no scene state is read), so the same code drives the real arms;
- a leader arm gives joint positions directly.

No rclpy here: the demo_recorder node feeds in key strings, twists and leader joint positions.

>>> keys = KeyboardTeleop()
>>> [keys.press(k) for k in ("w", "w", "enter")]
[None, None, 'end']
>>> keys.take_motion().delta_pos.tolist()
[0.02, 0.0, 0.0]
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field
from typing import Protocol

import mujoco
import numpy as np

from robocoach_skills.sim import mjcf
from robocoach_skills.sim.arms import ArmSpec
from robocoach_skills.sim.ik import IK_PITCH_WEIGHT, IKConfig, IKSolver
from robocoach_skills.sim.layout import get_layout

# Operator commands, whichever device or topic they come from.
CMD_END = "end"  # stop recording this take; the verdict comes next
CMD_ACCEPT = "accept"  # keep the take (ends it first when still recording)
CMD_DISCARD = "discard"  # drop the take (ends it first when still recording)
CMD_OPEN = "open"  # open the gripper
CMD_CLOSE = "close"  # close the gripper
CMD_TOGGLE_GRIPPER = "toggle_gripper"
COMMANDS = (CMD_END, CMD_ACCEPT, CMD_DISCARD, CMD_OPEN, CMD_CLOSE, CMD_TOGGLE_GRIPPER)

# Keyboard layout (end-effector frame = world frame, x away from the robot base, z up).
MOTION_KEYS: dict[str, tuple[int, int]] = {  # key -> (axis 0..2 = x, y, z, 3 = yaw; sign)
    "w": (0, +1),
    "s": (0, -1),
    "a": (1, +1),
    "d": (1, -1),
    "r": (2, +1),
    "f": (2, -1),
    "q": (3, +1),
    "e": (3, -1),
}
COMMAND_KEYS: dict[str, str] = {
    "\r": CMD_END,
    "\n": CMD_END,
    "y": CMD_ACCEPT,
    "n": CMD_DISCARD,
    " ": CMD_TOGGLE_GRIPPER,
}
KEY_NAMES = {"enter": "\n", "return": "\n", "space": " "}  # spelled-out keys, for the keys topic
KEY_HELP = (
    "w/s: +x/-x  a/d: +y/-y  r/f: up/down  q/e: turn wrist  space: gripper  "
    "enter: end take  y/n: accept/discard"
)


def normalise_key(key: str) -> str:
    """A key as typed or spelled out on the keys topic ("space", "enter") -> its character."""
    return KEY_NAMES.get(key.lower(), key) if len(key) != 1 else key


def key_command(key: str) -> str | None:
    """The operator command a key stands for, or None for motion and unknown keys."""
    return COMMAND_KEYS.get(normalise_key(key))


@dataclass(frozen=True)
class Motion:
    """End-effector displacement for one policy step."""

    delta_pos: np.ndarray = field(default_factory=lambda: np.zeros(3))  # (3,) world frame [m]
    delta_yaw: float = 0.0  # wrist turn about the world z axis [rad]


class TeleopSource(Protocol):
    """A device: told where the arm is when a take starts, asked for the next action every step."""

    def start(self, q: np.ndarray) -> None: ...

    def action(self, q: np.ndarray, gripper: float) -> np.ndarray: ...


# ---------------------------------------------------------------------------------------------- IK
@dataclass(frozen=True)
class CartesianConfig:
    """How an end-effector set-point becomes joint targets."""

    max_lead: float = 0.05  # the set-point never leads the measured end effector by more [m]
    ik_iters: int = 30  # IK iterations per step, warm-started from the last solution

    def __post_init__(self) -> None:
        if not self.max_lead > 0:
            raise ValueError(f"CartesianConfig.max_lead must be positive, got {self.max_lead}")
        if self.ik_iters < 1:
            raise ValueError(f"CartesianConfig.ik_iters must be >= 1, got {self.ik_iters}")


def _yaw_rotation(yaw: float) -> np.ndarray:
    c, s = math.cos(yaw), math.sin(yaw)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


class CartesianDriver:
    """End-effector set-point -> joint targets by IK on the arm's own kinematic model.

    The orientation held is the one the hand had when the take started, turned about the world
    vertical by the accumulated yaw, so starting a take never snaps the wrist. The set-point is kept
    within `max_lead` of where the hand really is, so holding a key against a reach limit or an
    obstacle does not wind it up.
    """

    def __init__(self, arm: ArmSpec, config: CartesianConfig | None = None):
        self.arm = arm
        self.config = config or CartesianConfig()
        model = mujoco.MjModel.from_xml_string(mjcf.build_scene_xml(arm, get_layout(arm.name)))
        ik_config = IKConfig(max_iters=self.config.ik_iters, pitch_weight=IK_PITCH_WEIGHT[arm.name])
        self.ik = IKSolver(model, arm.joint_names, mjcf.TCP_SITE, ik_config)
        self.setpoint = np.zeros(3)
        self._rotation = np.eye(3)
        self.yaw = 0.0
        self._q_cmd = np.asarray(arm.home, dtype=np.float64)

    def start(self, q: np.ndarray) -> None:
        self.setpoint, self._rotation = self.ik.forward(np.asarray(q, dtype=np.float64))
        self.yaw = 0.0
        self._q_cmd = np.asarray(q, dtype=np.float64).copy()

    def step(self, motion: Motion, q: np.ndarray) -> np.ndarray:
        """Move the set-point by `motion` and return the joint targets (n_joints,) that reach it."""
        hand, _ = self.ik.forward(np.asarray(q, dtype=np.float64))
        setpoint = self.setpoint + motion.delta_pos
        lead = setpoint - hand
        distance = float(np.linalg.norm(lead))
        if distance > self.config.max_lead:
            setpoint = hand + lead * (self.config.max_lead / distance)
        self.setpoint = setpoint
        self.yaw += motion.delta_yaw
        target_rot = _yaw_rotation(self.yaw) @ self._rotation
        self._q_cmd = self.ik.solve(self.setpoint, target_rot, self._q_cmd).q
        return self._q_cmd.copy()


# ---------------------------------------------------------------------------------------------- keyboard
@dataclass(frozen=True)
class KeyboardConfig:
    """Key presses as end-effector increments."""

    step: float = 0.01  # end-effector displacement per key press [m]
    yaw_step: float = 0.1  # wrist turn per key press [rad]
    # Presses of one key beyond this within one policy period are dropped, so a held key (terminal
    # auto-repeat, ~30 Hz) moves at most this many steps per period and stops as soon as it is released.
    max_presses_per_tick: int = 3

    def __post_init__(self) -> None:
        if not (self.step > 0 and self.yaw_step > 0):
            raise ValueError(f"KeyboardConfig steps must be positive, got {self.step}, {self.yaw_step}")
        if self.max_presses_per_tick < 1:
            raise ValueError(
                f"KeyboardConfig.max_presses_per_tick must be >= 1, got {self.max_presses_per_tick}"
            )


class KeyboardTeleop:
    """Keyboard end-effector teleop; `press` is thread-safe (keys arrive from stdin or a topic)."""

    def __init__(self, config: KeyboardConfig | None = None, driver: CartesianDriver | None = None):
        self.config = config or KeyboardConfig()
        self.driver = driver
        self._pending = np.zeros(4)  # presses since the last step, per axis (x, y, z, yaw), signed
        self._lock = threading.Lock()

    def press(self, key: str) -> str | None:
        """Register one key press; returns the operator command it stands for (None for motion/unknown)."""
        key = normalise_key(key)
        if key in COMMAND_KEYS:
            return COMMAND_KEYS[key]
        if key in MOTION_KEYS:
            axis, sign = MOTION_KEYS[key]
            with self._lock:
                self._pending[axis] += sign
        return None

    def take_motion(self) -> Motion:
        """The motion of the presses since the last call (capped per axis), and forget them."""
        cap = self.config.max_presses_per_tick
        with self._lock:
            presses, self._pending = np.clip(self._pending, -cap, cap), np.zeros(4)
        return Motion(presses[:3] * self.config.step, float(presses[3] * self.config.yaw_step))

    def start(self, q: np.ndarray) -> None:
        self.take_motion()  # keys typed before the take started do not move the arm
        self.driver.start(q)

    def action(self, q: np.ndarray, gripper: float) -> np.ndarray:
        return np.append(self.driver.step(self.take_motion(), q), gripper)


# ---------------------------------------------------------------------------------------------- spacemouse
@dataclass(frozen=True)
class TwistConfig:
    """A 6-DoF mouse's twist (geometry_msgs/Twist, axes in -1..1) as end-effector velocity."""

    linear_speed: float = 0.15  # end-effector speed at full deflection [m/s]
    yaw_rate: float = 1.0  # wrist turn rate at full deflection [rad/s]
    timeout: float = 0.3  # a twist older than this counts as zero (the device went quiet) [s]

    def __post_init__(self) -> None:
        if not (self.linear_speed > 0 and self.yaw_rate > 0 and self.timeout > 0):
            raise ValueError(f"TwistConfig values must be positive, got {self}")


class TwistTeleop:
    """Spacemouse teleop: the newest twist, held while fresh, integrated over each policy period."""

    def __init__(self, dt: float, config: TwistConfig | None = None, driver: CartesianDriver | None = None):
        self.dt = dt
        self.config = config or TwistConfig()
        self.driver = driver
        self._twist = (np.zeros(3), 0.0, -math.inf)  # linear, yaw axis, monotonic receive time
        self._lock = threading.Lock()

    def set_twist(self, linear: np.ndarray, yaw: float, now: float | None = None) -> None:
        """A twist from the device; axes outside -1..1 are clipped."""
        stamp = time.monotonic() if now is None else now
        with self._lock:
            self._twist = (
                np.clip(np.asarray(linear, dtype=np.float64), -1, 1),
                float(np.clip(yaw, -1, 1)),
                stamp,
            )

    def take_motion(self, now: float | None = None) -> Motion:
        now = time.monotonic() if now is None else now
        with self._lock:
            linear, yaw, stamp = self._twist
        if now - stamp > self.config.timeout:
            return Motion()
        cfg = self.config
        return Motion(linear * cfg.linear_speed * self.dt, yaw * cfg.yaw_rate * self.dt)

    def start(self, q: np.ndarray) -> None:
        self.driver.start(q)

    def action(self, q: np.ndarray, gripper: float) -> np.ndarray:
        return np.append(self.driver.step(self.take_motion(), q), gripper)


# ---------------------------------------------------------------------------------------------- leader arm
class LeaderArmTeleop:
    """A leader arm's joint positions become the follower's targets (the robot clips their speed).

    Positions are the follower's joints in order, optionally followed by the gripper opening 0..1;
    without one the gripper follows the operator's open/close commands. Until the leader has
    reported, or when it goes quiet for longer than `timeout`, the follower holds.
    """

    def __init__(self, arm: ArmSpec, timeout: float = 0.3):
        self.arm = arm
        self.timeout = timeout  # [s]
        self._positions: np.ndarray | None = None
        self._stamp = -math.inf
        self._hold = np.asarray(arm.home, dtype=np.float64)
        self._lock = threading.Lock()

    def set_positions(self, positions: np.ndarray, now: float | None = None) -> None:
        positions = np.asarray(positions, dtype=np.float64)
        if positions.size not in (self.arm.n_joints, self.arm.action_dim):
            raise ValueError(
                f"leader arm sent {positions.size} positions; {self.arm.name} needs {self.arm.n_joints} "
                f"(+1 gripper)"
            )
        with self._lock:
            self._positions, self._stamp = positions, time.monotonic() if now is None else now

    def start(self, q: np.ndarray) -> None:
        self._hold = np.asarray(q, dtype=np.float64).copy()

    def action(self, q: np.ndarray, gripper: float, now: float | None = None) -> np.ndarray:
        now = time.monotonic() if now is None else now
        with self._lock:
            positions, stamp = self._positions, self._stamp
        if positions is None or now - stamp > self.timeout:
            return np.append(self._hold, gripper)
        self._hold = positions[: self.arm.n_joints].copy()
        grip = float(positions[-1]) if positions.size == self.arm.action_dim else gripper
        return np.append(self._hold, grip)

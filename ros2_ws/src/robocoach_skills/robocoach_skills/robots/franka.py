"""The `franka` backend: a Franka Research 3 with a Franka Hand, over one of two transports.

`transport="libfranka"` talks FCI directly through `pylibfranka` (Franka's official bindings, 0.21):

- the arm runs a joint-position motion generator (`start_joint_position_control`, joint-impedance
  controller) in a 1 kHz loop that steers a `JointTargetFilter` toward the latest target the policy
  sent. That target was already clipped by the base class (position limits, and at most one policy
  period of velocity away from the measured pose), and the filter keeps the 1 kHz command's velocity,
  acceleration and jerk under `MotionLimits`, so the Control never sees a discontinuity;
- collision thresholds and joint impedance are set at connect (before motion, as libfranka requires),
  after `automatic_error_recovery()` when `FrankaConfig.automatic_error_recovery` asks for it;
- the hand is driven with `Gripper.homing` (at connect), `move` for a command >= `grasp_below` (the
  command 0..1 maps linearly onto 0..`max_width` as measured by homing) and `grasp` below it (the
  fingers close until they meet something and hold it with `grasp_force`);
- a libfranka exception (a reflex, the user stop, a lost connection) ends the loop; the base class
  latches it as a fault on the next call, as it does for every backend. A fault that came right after
  the loop missed FCI cycles says so (`missed_cycles_note`): the Control extrapolates a missed cycle,
  and a stall mid-motion can then trip a discontinuity reflex on a smooth command stream;
- disconnect brings the filter to rest and ends the motion with `motion_finished`; e-stop calls
  `Robot.stop()`, which preempts the running motion at once.

pylibfranka releases the GIL in none of its calls (read, write, gripper moves: its pybind11 bindings
have no `gil_scoped_release`; measured here, a 1 kHz `readOnce` loop let a second Python thread run
only about 150 times a second). A loop in a thread of the policy process would therefore stall the
policy, and a policy holding the GIL would make the loop miss cycles (on the robot:
`communication_constraints_violation`). So the arm loop and the gripper each run in a process of
their own (multiprocessing, spawn), sharing the target and the measurements through shared memory.

`transport="franka_ros2"` is for workstations that run franka_ros2 with its MoveIt config: joint
positions come from `joint_states` (`fr3_joint1..7`, fingers `fr3_finger_joint1/2`), each action
becomes a one-point `control_msgs/FollowJointTrajectory` goal for `fr3_arm_controller`, and the hand
is driven through the `franka_gripper` node's `~/homing`, `~/move` and `~/grasp` actions
(`franka_msgs`). `control_msgs` and `franka_msgs` come with a ROS 2 install, not from PyPI: they are
imported only when this transport connects.

Joint limits: the Franka `ArmSpec` uses Panda limits (what the shared datasets use); an FR3 allows less
at joints 1, 4, 5, 6 and 7 (its q6 range starts at 0.5445 rad), so this backend clips to the
intersection of both (`fr3_arm()`), and a target the FR3 would refuse never leaves this process.
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import math
import multiprocessing as mp
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from robocoach_skills.constants import OBS_PROPRIO
from robocoach_skills.robots.base import HEALTHY, Robot, RobotFaultError, RobotHealth, register_robot
from robocoach_skills.sim.arms import ArmSpec, get_arm

# FR3 joint position limits [rad]: Franka's "Robot and interface specifications", FR3 column
# (frankaemika.github.io/docs/control_parameters.html).
FR3_LOWER = (-2.7437, -1.7837, -2.9007, -3.0421, -2.8065, 0.5445, -3.0159)
FR3_UPPER = (2.7437, 1.7837, 2.9007, -0.1518, 2.8065, 4.5169, 3.0159)
# FR3 position-based velocity limits, per joint: near a position limit the allowed speed toward it is
# min(dq_max, sqrt(2 deceleration distance) - offset). franka_description fr3 URDF
# <position_based_velocity_limits>, the same numbers as libfranka's rate_limiting.h.
FR3_VELOCITY_OFFSET = (0.30, 0.20, 0.20, 0.30, 0.35, 0.35, 0.35)  # [rad/s]
FR3_DECELERATION = (6.0, 2.585, 3.5, 4.0, 17.0, 5.5, 17.0)  # [rad/s^2]
# The filter plans its braking with this fraction of that deceleration, so that the jerk bound's delay
# in reaching it never carries the command past the robot's own envelope.
BRAKING_MARGIN = 0.5
GRASP_EPSILON_INNER = 0.005  # libfranka's default grasp tolerance [m]; grasps here target width 0
FR3_FINGER_JOINTS = ("fr3_finger_joint1", "fr3_finger_joint2")  # franka_description, each 0..0.04 m

SPAWN = mp.get_context("spawn")  # no fork: the parent may hold DDS / torch threads
STATE_FIELDS = 7 + 2  # shared arm state: q[7], monotonic time of the reading [s], the robot's clock [s]
GRIPPER_FIELDS = 3  # shared gripper state: width [m], max_width [m], monotonic time [s]
WORKER_JOIN_TIMEOUT = 5.0  # a worker that has not ended this long after being asked is killed [s]
FCI_CYCLE = 0.001  # the Control's command period [s]
MISSED_CYCLES_NOTE = "the 1 kHz loop missed"  # how a fault that followed missed cycles says so
MISSED_CYCLES_WINDOW = 20  # reads a fault looks back over for missed cycles (the FCI aborts at 20 in a row)


def fr3_arm() -> ArmSpec:
    """The Franka ArmSpec with its position limits narrowed to what an FR3 accepts."""
    franka = get_arm("franka")
    return dataclasses.replace(
        franka,
        lower=tuple(max(a, b) for a, b in zip(franka.lower, FR3_LOWER, strict=True)),
        upper=tuple(min(a, b) for a, b in zip(franka.upper, FR3_UPPER, strict=True)),
    )


# ---------------------------------------------------------------------------------------------- config
@dataclass
class FrankaConfig:
    """How to reach one FR3 and how it may move."""

    transport: str = "libfranka"  # "libfranka" (FCI via pylibfranka) or "franka_ros2" (a running franka_ros2)
    robot_ip: str = "172.16.0.2"  # libfranka: FCI address of the arm's Control (Franka's default)
    realtime: bool = True  # libfranka: refuse to run without realtime scheduling (kEnforce); False for sims
    automatic_error_recovery: bool = False  # libfranka: clear a reflex left from before, at connect
    policy_hz: float = 10.0  # action rate [Hz]; the velocity limit is applied over 1/policy_hz
    gripper: bool = True  # drive the Franka Hand
    home_gripper: bool = True  # home the hand at connect (calibrates max_width; the fingers open fully)
    gripper_speed: float = 0.1  # finger speed of move and grasp [m/s]
    grasp_force: float = 20.0  # force a grasp holds with [N] (the hand allows up to 70 N continuous)
    grasp_below: float = 0.5  # a gripper command under this closes with a grasp (until contact), else a move
    gripper_deadband: float = 0.05  # move targets closer than this to the last one are not sent [0..1]
    feedback_timeout: float = 0.1  # no arm state for this long -> hold and fault [s]
    connect_timeout: float = 10.0  # wait this long for the first arm and gripper state [s]
    # libfranka collision thresholds (Franka's example defaults): contact above `lower` is reported,
    # above `upper` the robot stops with a reflex. Torques [N m] per joint, forces [N, N m] per axis.
    lower_torque_thresholds: tuple[float, ...] = (20.0,) * 7
    upper_torque_thresholds: tuple[float, ...] = (40.0,) * 7
    lower_force_thresholds: tuple[float, ...] = (10.0,) * 6
    upper_force_thresholds: tuple[float, ...] = (20.0,) * 6
    joint_impedance: tuple[float, ...] = (3000.0, 3000.0, 3000.0, 2500.0, 2500.0, 2000.0, 2000.0)  # [N m/rad]
    max_acceleration: float = 5.0  # 1 kHz command acceleration bound [rad/s^2] (FR3 allows 10)
    max_jerk: float = 2000.0  # 1 kHz command jerk bound [rad/s^3] (FR3 allows 5000)
    tracking_bandwidth: float = 25.0  # natural frequency of the target filter [rad/s]
    # franka_ros2 transport
    namespace: str = ""  # ROS namespace of the franka_ros2 bringup
    joint_states_topic: str = "joint_states"  # sensor_msgs/JointState with fr3_joint1..7 (+ fingers)
    arm_controller: str = "fr3_arm_controller"  # JointTrajectoryController of franka_fr3_moveit_config
    gripper_node: str = "franka_gripper"  # node offering ~/homing, ~/move, ~/grasp

    def __post_init__(self) -> None:
        if self.transport not in TRANSPORTS:
            raise ValueError(f"FrankaConfig.transport {self.transport!r} is not one of {tuple(TRANSPORTS)}")
        if not self.robot_ip:
            raise ValueError(f"FrankaConfig.robot_ip must name the arm's Control, got {self.robot_ip!r}")
        for name in ("policy_hz", "gripper_speed", "grasp_force", "feedback_timeout", "connect_timeout"):
            if not getattr(self, name) > 0:
                raise ValueError(f"FrankaConfig.{name} must be positive, got {getattr(self, name)}")
        for name in ("max_acceleration", "max_jerk", "tracking_bandwidth"):
            if not getattr(self, name) > 0:
                raise ValueError(f"FrankaConfig.{name} must be positive, got {getattr(self, name)}")
        if not 0.0 < self.grasp_below <= 1.0:
            raise ValueError(f"FrankaConfig.grasp_below {self.grasp_below} outside (0, 1]")
        if not 0.0 <= self.gripper_deadband < 1.0:
            raise ValueError(f"FrankaConfig.gripper_deadband {self.gripper_deadband} outside [0, 1)")
        for name, size in (
            ("lower_torque_thresholds", 7),
            ("upper_torque_thresholds", 7),
            ("lower_force_thresholds", 6),
            ("upper_force_thresholds", 6),
            ("joint_impedance", 7),
        ):
            if len(getattr(self, name)) != size:
                raise ValueError(f"FrankaConfig.{name} needs {size} values, got {getattr(self, name)}")

    def motion_limits(self, arm: ArmSpec) -> MotionLimits:
        return MotionLimits(
            lower=arm.lower,
            upper=arm.upper,
            velocity=arm.velocity,
            velocity_offset=FR3_VELOCITY_OFFSET,
            deceleration=FR3_DECELERATION,
            acceleration=self.max_acceleration,
            jerk=self.max_jerk,
            bandwidth=self.tracking_bandwidth,
        )


# ---------------------------------------------------------------------------------------------- filter
@dataclass(frozen=True)
class MotionLimits:
    """Bounds of the 1 kHz joint command the filter produces."""

    lower: tuple[float, ...]  # position limits per joint [rad]
    upper: tuple[float, ...]
    velocity: tuple[float, ...]  # per joint [rad/s]
    velocity_offset: tuple[
        float, ...
    ]  # position-based velocity envelope, per joint (see FR3_VELOCITY_OFFSET)
    deceleration: tuple[float, ...]  # [rad/s^2]
    acceleration: float  # [rad/s^2]
    jerk: float  # [rad/s^3]
    bandwidth: float  # natural frequency of the critically damped pull toward the goal [rad/s]


@dataclass
class JointTargetFilter:
    """Turns a goal that jumps at the policy rate into a smooth 1 kHz joint-position command.

    A critically damped second-order pull toward the goal. The acceleration is bounded by what keeps the
    velocity inside its envelope (the velocity limit, shrinking near a position limit as the FR3's does,
    planned with BRAKING_MARGIN of its deceleration), then by the jerk bound, then by the acceleration
    bound; the jerk bound wins, so the command stays smooth, and the final clip to the robot's own
    envelope only trims what the margin did not absorb.

    >>> limits = MotionLimits(
    ...     lower=(-1.0,), upper=(1.0,), velocity=(1.0,), velocity_offset=(0.3,), deceleration=(6.0,),
    ...     acceleration=5.0, jerk=2000.0, bandwidth=25.0)
    >>> f = JointTargetFilter(np.zeros(1), limits)
    >>> q = [f.step(np.array([0.1]), 0.001)[0] for _ in range(1000)]
    >>> round(float(q[-1]), 4), bool(max(q) < 0.1 + 1e-4)  # settles on the goal without overshooting
    (0.1, True)
    """

    q: np.ndarray  # commanded position [rad]
    limits: MotionLimits
    v: np.ndarray = field(init=False)  # commanded velocity [rad/s]
    a: np.ndarray = field(init=False)  # commanded acceleration [rad/s^2]

    def __post_init__(self) -> None:
        self.q = np.array(self.q, dtype=np.float64)
        self.v = np.zeros_like(self.q)
        self.a = np.zeros_like(self.q)
        limits = self.limits
        self._lower, self._upper = np.asarray(limits.lower), np.asarray(limits.upper)
        self._v_max = np.asarray(limits.velocity, dtype=np.float64)
        self._offset, self._deceleration = np.asarray(limits.velocity_offset), np.asarray(limits.deceleration)

    def velocity_envelope(self, braking: float) -> tuple[np.ndarray, np.ndarray]:
        """(lowest, highest) velocity allowed at the commanded position, braking at `braking` x decel."""
        decel = 2.0 * braking * self._deceleration

        def toward(distance: np.ndarray) -> np.ndarray:
            ramp = np.sqrt(decel * np.maximum(distance, 0.0)) - self._offset
            return np.minimum(self._v_max, np.maximum(ramp, 0.0))

        return -toward(self.q - self._lower), toward(self._upper - self.q)

    def step(self, goal: np.ndarray, dt: float) -> np.ndarray:
        """Advance by `dt` seconds toward `goal`; returns the new command (a copy)."""
        if dt <= 0:
            return self.q.copy()
        w = self.limits.bandwidth
        a = w * w * (goal - self.q) - 2.0 * w * self.v
        v_low, v_high = self.velocity_envelope(BRAKING_MARGIN)
        a = np.clip(a, (v_low - self.v) / dt, (v_high - self.v) / dt)
        jerk_step = self.limits.jerk * dt
        a = np.clip(a, self.a - jerk_step, self.a + jerk_step)
        self.a = np.clip(a, -self.limits.acceleration, self.limits.acceleration)
        self.v = np.clip(self.v + self.a * dt, *self.velocity_envelope(1.0))
        self.q = self.q + self.v * dt
        return self.q.copy()

    def at_rest(self, velocity_tolerance: float, acceleration_tolerance: float) -> bool:
        return bool(
            np.all(np.abs(self.v) <= velocity_tolerance) and np.all(np.abs(self.a) <= acceleration_tolerance)
        )


REST_VELOCITY = 1e-3  # the motion may be finished once every joint command is this slow [rad/s]
REST_ACCELERATION = 1e-2  # ... and accelerates this little [rad/s^2]


# ---------------------------------------------------------------------------------------------- gripper
def opening_to_width(opening: float, max_width: float) -> float:
    """Gripper command 0 (closed) .. 1 (open) -> finger distance [m].

    >>> opening_to_width(0.5, 0.08)
    0.04
    """
    return min(max(opening, 0.0), 1.0) * max_width


def width_to_opening(width: float, max_width: float) -> float:
    """Measured finger distance [m] -> opening 0..1.

    >>> width_to_opening(0.02, 0.08)
    0.25
    """
    return min(max(width / max_width, 0.0), 1.0)


class GripperCall(enum.StrEnum):
    """The Franka Hand call a gripper command becomes."""

    MOVE = "move"  # position the fingers at a width (stops, and fails, on an obstacle)
    GRASP = "grasp"  # close until the fingers meet something, then hold it with a force


@dataclass(frozen=True)
class GripperRequest:
    """One hand call: the hand's grasp closes until contact whatever width it is given (the width only
    decides success), so a policy's "closed" becomes a grasp and every other opening a move."""

    call: GripperCall
    width: float  # move target, or 0 for a grasp [m]

    @classmethod
    def for_command(cls, opening: float, max_width: float, grasp_below: float) -> GripperRequest:
        """
        >>> GripperRequest.for_command(0.2, 0.08, 0.5)
        GripperRequest(call=<GripperCall.GRASP: 'grasp'>, width=0.0)
        >>> GripperRequest.for_command(0.5, 0.08, 0.5)
        GripperRequest(call=<GripperCall.MOVE: 'move'>, width=0.04)
        """
        if opening < grasp_below:
            return cls(GripperCall.GRASP, 0.0)
        return cls(GripperCall.MOVE, opening_to_width(opening, max_width))

    def differs(self, other: GripperRequest | None, tolerance: float) -> bool:
        """Worth sending after `other`: another call, or a move more than `tolerance` [m] away."""
        return other is None or self.call != other.call or abs(self.width - other.width) > tolerance


# ---------------------------------------------------------------------------------------------- transports
class FrankaTransport(Protocol):
    """What `FrankaRobot` needs from a way of reaching the arm."""

    def connect(self) -> None: ...
    def disconnect(self) -> None: ...
    def joint_positions(self) -> np.ndarray: ...
    def gripper_opening(self) -> float: ...
    def fault(self) -> str | None: ...  # why the arm cannot be used, or None
    def command(self, joints: np.ndarray, gripper: float) -> None: ...
    def hold(self) -> None: ...
    def estop(self) -> None: ...


@dataclass
class _ArmLink:
    """Shared memory and signals between the robot object and its arm process."""

    goal: Any = field(default_factory=lambda: SPAWN.Array("d", 7))  # target joint positions [rad]
    state: Any = field(default_factory=lambda: SPAWN.Array("d", STATE_FIELDS))
    ready: Any = field(default_factory=SPAWN.Event)  # the motion has started
    stop: Any = field(default_factory=SPAWN.Event)  # come to rest and finish the motion
    estop: Any = field(default_factory=SPAWN.Event)  # Robot.stop() now
    errors: Any = field(default_factory=SPAWN.Queue)  # "<Exception>: <message>" of what ended the loop


@dataclass
class _GripperLink:
    """Shared memory and signals between the robot object and its gripper process."""

    state: Any = field(default_factory=lambda: SPAWN.Array("d", GRIPPER_FIELDS))
    commands: Any = field(default_factory=SPAWN.Queue)  # GripperRequest; the newest wins
    ready: Any = field(default_factory=SPAWN.Event)
    stop: Any = field(default_factory=SPAWN.Event)
    errors: Any = field(default_factory=SPAWN.Queue)


def _publish_arm_state(link: _ArmLink, state: Any) -> None:
    with link.state.get_lock():
        link.state[:] = (*state.q, time.monotonic(), state.time.to_sec())


def missed_cycles_note(missed: Sequence[int]) -> str:
    """What a fault adds when the loop missed FCI cycles just before it (`missed`: per cycle read).

    The Control extrapolates a missed cycle and differences the next command against that guess, so a
    loop that stalls mid-motion can trip a discontinuity reflex with a smooth command stream; the note
    says so, and what to do about it.

    >>> missed_cycles_note([0, 0, 0])
    ''
    >>> missed_cycles_note([0, 2, 0, 1])
    ' (the 1 kHz loop missed 3 of the last 7 FCI cycles before it: run it realtime, FrankaConfig.realtime)'
    """
    total = sum(missed)
    if total == 0:
        return ""
    return (
        f" ({MISSED_CYCLES_NOTE} {total} of the last {total + len(missed)} FCI cycles before it:"
        " run it realtime, FrankaConfig.realtime)"
    )


def _arm_process(config: FrankaConfig, limits: MotionLimits, link: _ArmLink) -> None:
    """Body of the arm process: configure the arm, then the 1 kHz joint-position loop."""
    import pylibfranka as franka

    missed = collections.deque(maxlen=MISSED_CYCLES_WINDOW)  # FCI cycles skipped before each read
    try:
        realtime = franka.RealtimeConfig.kEnforce if config.realtime else franka.RealtimeConfig.kIgnore
        robot = franka.Robot(config.robot_ip, realtime)
        if config.automatic_error_recovery:
            robot.automatic_error_recovery()
        robot.set_collision_behavior(
            list(config.lower_torque_thresholds),
            list(config.upper_torque_thresholds),
            list(config.lower_force_thresholds),
            list(config.upper_force_thresholds),
        )
        robot.set_joint_impedance(list(config.joint_impedance))
        control = robot.start_joint_position_control(franka.ControllerMode.JointImpedance)
        state, _ = control.readOnce()
        start = np.array(state.q_d)  # the first command must continue the Control's own
        with link.goal.get_lock():
            link.goal[:] = start
        _publish_arm_state(link, state)
        command = JointTargetFilter(start, limits)
        link.ready.set()
        stop_goal = None
        while True:
            state, period = control.readOnce()
            missed.append(max(round(period.to_sec() / FCI_CYCLE) - 1, 0))
            _publish_arm_state(link, state)
            if link.estop.is_set():
                robot.stop()
                return
            if stop_goal is None and link.stop.is_set():
                stop_goal = command.q.copy()  # brake on the spot
            if stop_goal is None:
                with link.goal.get_lock():
                    goal = np.array(link.goal[:])
            else:
                goal = stop_goal
            q = command.step(goal, period.to_sec())
            out = franka.JointPositions(q.tolist())
            out.motion_finished = stop_goal is not None and command.at_rest(REST_VELOCITY, REST_ACCELERATION)
            control.writeOnce(out)
            if out.motion_finished:
                return
    except Exception as error:  # every libfranka error ends the loop; the parent reports it
        link.errors.put(f"{type(error).__name__}: {error}{missed_cycles_note(missed)}")


def _gripper_process(config: FrankaConfig, link: _GripperLink) -> None:
    """Body of the gripper process: homing, then execute the newest command, polling state in between."""
    import pylibfranka as franka

    def publish(gripper_state: Any) -> None:
        with link.state.get_lock():
            link.state[:] = (gripper_state.width, gripper_state.max_width, time.monotonic())

    try:
        gripper = franka.Gripper(config.robot_ip)
        if config.home_gripper and not gripper.homing():
            raise RuntimeError("Franka Hand homing reported failure")
        publish(gripper.read_once())
        link.ready.set()
        while not link.stop.is_set():
            try:
                command = link.commands.get(timeout=config.feedback_timeout)
            except queue.Empty:
                command = None
            while True:  # only the newest command matters
                try:
                    command = link.commands.get_nowait()
                except queue.Empty:
                    break
            if command is not None and command.call == GripperCall.GRASP:
                # Any object counts: epsilon_outer spans the stroke. False = nothing between the fingers.
                gripper.grasp(
                    0.0, config.gripper_speed, config.grasp_force, GRASP_EPSILON_INNER, link.state[1]
                )
            elif command is not None and not gripper.move(command.width, config.gripper_speed):
                raise RuntimeError(f"Franka Hand move to {command.width:.4f} m reported failure")
            publish(gripper.read_once())
    except Exception as error:  # reported to the parent, which faults the robot
        link.errors.put(f"{type(error).__name__}: {error}")


def _first_error(errors: Any) -> str | None:
    try:
        return errors.get_nowait()
    except queue.Empty:
        return None


def _wait_for(event: Any, process: Any, timeout: float) -> bool:
    """Wait for `event` while `process` lives; False on timeout or when the process died first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if event.wait(timeout=0.05):
            return True
        if not process.is_alive():
            return event.is_set()
    return False


def _end_process(process: Any) -> None:
    process.join(timeout=WORKER_JOIN_TIMEOUT)
    if process.is_alive():
        process.kill()
        process.join()


class LibfrankaTransport:
    """FCI through pylibfranka, the arm and the hand each in a process of their own."""

    def __init__(self, config: FrankaConfig, arm: ArmSpec):
        self.config = config
        self.arm = arm
        self._arm_link: _ArmLink | None = None
        self._arm_process: Any = None
        self._gripper_link: _GripperLink | None = None
        self._gripper_process: Any = None
        self._error: str | None = None
        self._gripper_request: GripperRequest | None = None  # the last one sent

    def connect(self) -> None:
        cfg = self.config
        self._error = None
        self._arm_link = _ArmLink()
        self._arm_process = SPAWN.Process(
            target=_arm_process, args=(cfg, cfg.motion_limits(self.arm), self._arm_link), daemon=True
        )
        self._arm_process.start()
        if not _wait_for(self._arm_link.ready, self._arm_process, cfg.connect_timeout):
            reason = (
                _first_error(self._arm_link.errors) or f"no motion started within {cfg.connect_timeout} s"
            )
            self._close()
            raise RobotFaultError(f"cannot start the FR3 at {cfg.robot_ip} via libfranka: {reason}")
        if cfg.gripper:
            self._gripper_link = _GripperLink()
            self._gripper_process = SPAWN.Process(
                target=_gripper_process, args=(cfg, self._gripper_link), daemon=True
            )
            self._gripper_process.start()
            if not _wait_for(self._gripper_link.ready, self._gripper_process, cfg.connect_timeout):
                reason = _first_error(self._gripper_link.errors) or f"no state within {cfg.connect_timeout} s"
                self._close()
                raise RobotFaultError(f"cannot start the Franka Hand at {cfg.robot_ip}: {reason}")
            self._gripper_request = None

    def disconnect(self) -> None:
        self._close()

    def _close(self) -> None:
        if self._gripper_process is not None:
            self._gripper_link.stop.set()
            _end_process(self._gripper_process)
        if self._arm_process is not None:
            self._arm_link.stop.set()
            _end_process(self._arm_process)
        self._arm_link = self._arm_process = self._gripper_link = self._gripper_process = None

    def _arm_state(self) -> np.ndarray:
        with self._arm_link.state.get_lock():
            return np.array(self._arm_link.state[:])

    def joint_positions(self) -> np.ndarray:
        return self._arm_state()[:7]

    def robot_time(self) -> float:
        """The Control's clock at the newest state [s]: wall time on a robot, slower in an overloaded sim."""
        return float(self._arm_state()[8])

    def gripper_opening(self) -> float:
        if self._gripper_link is None:
            return 0.0
        width, max_width, _ = self._gripper_link.state[:]
        return width_to_opening(width, max_width)

    def fault(self) -> str | None:
        if self._error is None:
            error = _first_error(self._arm_link.errors)
            if error is None and self._gripper_link is not None:
                gripper_error = _first_error(self._gripper_link.errors)
                error = f"Franka Hand: {gripper_error}" if gripper_error else None
            self._error = error
        if self._error is not None:
            return f"libfranka: {self._error}"
        if not self._arm_process.is_alive():
            return "libfranka: the arm control process has exited"
        if self._gripper_process is not None and not self._gripper_process.is_alive():
            return "libfranka: the Franka Hand process has exited"
        age = time.monotonic() - self._arm_state()[7]
        if age > self.config.feedback_timeout:
            return f"lost FR3 state: none for {age:.3f} s (timeout {self.config.feedback_timeout} s)"
        return None

    def command(self, joints: np.ndarray, gripper: float) -> None:
        with self._arm_link.goal.get_lock():
            self._arm_link.goal[:] = joints
        if self._gripper_link is None:
            return
        max_width = self._gripper_link.state[1]
        request = GripperRequest.for_command(gripper, max_width, self.config.grasp_below)
        if request.differs(self._gripper_request, self.config.gripper_deadband * max_width):
            self._gripper_link.commands.put(request)
            self._gripper_request = request

    def hold(self) -> None:
        with self._arm_link.goal.get_lock():
            self._arm_link.goal[:] = self.joint_positions()

    def estop(self) -> None:
        self._arm_link.estop.set()


class FrankaRos2Transport:
    """A running franka_ros2: `joint_states` in, FollowJointTrajectory and franka_gripper actions out."""

    def __init__(self, config: FrankaConfig, arm: ArmSpec):
        self.config = config
        self.arm = arm
        self.listener: JointStateListener | None = None
        self._arm_client: Any = None
        self._gripper_clients: dict[str, Any] = {}
        self._messages: dict[str, Any] = {}
        self._gripper_request: GripperRequest | None = None

    def connect(self) -> None:
        messages = _import_franka_ros2_interfaces()
        cfg = self.config
        listener = JointStateListener(self.arm.joint_names, cfg.namespace, cfg.joint_states_topic)
        from rclpy.action import ActionClient

        node = listener.node
        arm_action = f"{cfg.arm_controller}/follow_joint_trajectory"
        arm_client = ActionClient(node, messages["FollowJointTrajectory"], arm_action)
        gripper_clients = {
            name: ActionClient(node, messages[name], f"{cfg.gripper_node}/{name.lower()}")
            for name in ("Homing", "Move", "Grasp")
        }
        listener.start()
        try:
            if not arm_client.wait_for_server(timeout_sec=cfg.connect_timeout):
                raise RobotFaultError(f"no {arm_action} action server within {cfg.connect_timeout} s")
            if not listener.wait_for_state(cfg.connect_timeout):
                raise RobotFaultError(
                    f"no {cfg.joint_states_topic} with {self.arm.joint_names} within {cfg.connect_timeout} s"
                )
            if cfg.gripper and cfg.home_gripper:
                gripper_clients["Homing"].send_goal_async(messages["Homing"].Goal())
        except BaseException:
            listener.close()
            raise
        self.listener, self._arm_client, self._gripper_clients, self._messages = (
            listener,
            arm_client,
            gripper_clients,
            messages,
        )
        self._gripper_request = None

    def disconnect(self) -> None:
        listener, self.listener = self.listener, None
        if listener is not None:
            listener.close()

    def joint_positions(self) -> np.ndarray:
        return self.listener.positions

    def gripper_opening(self) -> float:
        return width_to_opening(self.listener.finger_width, self.arm.gripper.stroke)

    def fault(self) -> str | None:
        age, timeout = self.listener.age(), self.config.feedback_timeout
        if age > timeout:
            return f"lost {self.config.joint_states_topic}: none for {age:.3f} s (timeout {timeout} s)"
        return None

    def _send_joints(self, joints: np.ndarray) -> None:
        from builtin_interfaces.msg import Duration
        from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

        seconds = 1.0 / self.config.policy_hz
        point = JointTrajectoryPoint(
            positions=[float(q) for q in joints],
            time_from_start=Duration(sec=int(seconds), nanosec=int((seconds % 1) * 1e9)),
        )
        goal = self._messages["FollowJointTrajectory"].Goal()
        goal.trajectory = JointTrajectory(joint_names=list(self.arm.joint_names), points=[point])
        self._arm_client.send_goal_async(goal)  # a new goal preempts the running one

    def command(self, joints: np.ndarray, gripper: float) -> None:
        self._send_joints(joints)
        if not self.config.gripper:
            return
        cfg, stroke = self.config, self.arm.gripper.stroke
        request = GripperRequest.for_command(gripper, stroke, cfg.grasp_below)
        if not request.differs(self._gripper_request, cfg.gripper_deadband * stroke):
            return
        if request.call == GripperCall.GRASP:
            goal = self._messages["Grasp"].Goal(width=0.0, speed=cfg.gripper_speed, force=cfg.grasp_force)
            goal.epsilon.inner, goal.epsilon.outer = GRASP_EPSILON_INNER, stroke
            self._gripper_clients["Grasp"].send_goal_async(goal)
        else:
            goal = self._messages["Move"].Goal(width=request.width, speed=cfg.gripper_speed)
            self._gripper_clients["Move"].send_goal_async(goal)
        self._gripper_request = request

    def hold(self) -> None:
        if self.listener.age() <= self.config.feedback_timeout:
            self._send_joints(self.listener.positions)

    def estop(self) -> None:
        """franka_ros2 has no software stop: target the measured pose (the user stop button is the e-stop)."""
        self.hold()


def _import_franka_ros2_interfaces() -> dict[str, Any]:
    """The action types of the franka_ros2 transport, or an error naming the missing ROS package."""
    try:
        from control_msgs.action import FollowJointTrajectory
    except ImportError as error:
        raise RobotFaultError(
            "the franka_ros2 transport needs the ROS 2 package control_msgs (not on PyPI; on the robot "
            f"workstation: apt install ros-$ROS_DISTRO-control-msgs, or source your ROS 2 setup): {error}"
        ) from error
    try:
        from franka_msgs.action import Grasp, Homing, Move
    except ImportError as error:
        raise RobotFaultError(
            "the franka_ros2 transport needs franka_msgs from franka_ros2 (not on PyPI; build franka_ros2 "
            f"and source its install/setup.bash): {error}"
        ) from error
    return {"FollowJointTrajectory": FollowJointTrajectory, "Homing": Homing, "Move": Move, "Grasp": Grasp}


def joint_positions_from_state(
    names: Sequence[str], positions: Sequence[float], joint_names: Sequence[str]
) -> np.ndarray | None:
    """Positions of `joint_names` (in that order) from one JointState, or None if any is missing.

    >>> joint_positions_from_state(["b", "a", "c"], [2.0, 1.0, 3.0], ["a", "b"]).tolist()
    [1.0, 2.0]
    >>> joint_positions_from_state(["a"], [1.0], ["a", "b"]) is None
    True
    """
    index = {name: i for i, name in enumerate(names)}
    if any(name not in index for name in joint_names):
        return None
    return np.array([positions[index[name]] for name in joint_names], dtype=np.float64)


class JointStateListener:
    """An rclpy node in a private context that keeps the newest FR3 joint (and finger) positions."""

    def __init__(self, joint_names: Sequence[str], namespace: str, topic: str):
        import rclpy
        from rclpy.context import Context
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.node import Node
        from rclpy.qos import qos_profile_sensor_data
        from sensor_msgs.msg import JointState

        self.joint_names = tuple(joint_names)
        self._context = Context()
        rclpy.init(context=self._context)
        self.node = Node("robocoach_franka", namespace=namespace or None, context=self._context)
        self.node.create_subscription(JointState, topic, self._on_state, qos_profile_sensor_data)
        self._executor = SingleThreadedExecutor(context=self._context)
        self._executor.add_node(self.node)
        self._thread = threading.Thread(target=self._executor.spin, name="franka-ros2", daemon=True)
        self._stamp = -math.inf  # monotonic time of the newest complete arm state [s]
        self._received = threading.Event()
        self.positions = np.zeros(len(self.joint_names))
        self.finger_width = 0.0  # [m]

    def start(self) -> None:
        self._thread.start()

    def _on_state(self, msg: Any) -> None:
        fingers = joint_positions_from_state(msg.name, msg.position, FR3_FINGER_JOINTS)
        if fingers is not None:  # the aggregated joint_states carries the hand too
            self.finger_width = float(fingers.sum())
        positions = joint_positions_from_state(msg.name, msg.position, self.joint_names)
        if positions is not None:
            self.positions = positions
            self._stamp = time.monotonic()
            self._received.set()

    def wait_for_state(self, timeout: float) -> bool:
        return self._received.wait(timeout)

    def age(self) -> float:
        return time.monotonic() - self._stamp

    def close(self) -> None:
        self._executor.shutdown()
        self.node.destroy_node()
        self._context.try_shutdown()
        if self._thread.is_alive():
            self._thread.join()


TRANSPORTS: dict[str, Callable[[FrankaConfig, ArmSpec], FrankaTransport]] = {
    "libfranka": LibfrankaTransport,
    "franka_ros2": FrankaRos2Transport,
}


# ---------------------------------------------------------------------------------------------- backend
@register_robot("franka")
class FrankaRobot(Robot):
    """An FR3 + Franka Hand; the base class validates and clips, the transport moves the arm."""

    config_class = FrankaConfig

    def __init__(self, config: FrankaConfig):
        super().__init__(fr3_arm(), 1.0 / config.policy_hz)
        self.config = config
        self.transport: FrankaTransport | None = None

    @property
    def is_connected(self) -> bool:
        return self.transport is not None

    def _describe(self) -> str:
        return f"{self.name} via {self.config.transport} ({self.config.robot_ip})"

    def _connect(self) -> None:
        transport = TRANSPORTS[self.config.transport](self.config, self.arm)
        transport.connect()
        self.transport = transport

    def _disconnect(self) -> None:
        transport, self.transport = self.transport, None
        if transport is not None:
            transport.disconnect()

    def _health(self) -> RobotHealth:
        reason = self.transport.fault()
        return HEALTHY if reason is None else RobotHealth.fault(reason)

    def _joint_positions(self) -> np.ndarray:
        return self.transport.joint_positions()

    def _observe(self) -> dict[str, np.ndarray]:
        proprio = np.append(self._joint_positions(), self.transport.gripper_opening()).astype(np.float32)
        return {OBS_PROPRIO: proprio}

    def _apply_action(self, applied: np.ndarray) -> None:
        n = self.arm.n_joints
        self.transport.command(applied[:n], float(applied[n]))

    def _hold(self) -> None:
        self.transport.hold()

    def _estop(self) -> None:
        self.transport.estop()

"""The `piper_sdk` backend: an AgileX PiPER over CAN through AgileX's `piper_sdk.C_PiperInterface_V2`.

What goes on the wire (CAN ids and byte layouts read from piper_sdk 0.6.2,
`piper_msgs/msg_v2/can_id.py` and `protocol/protocol_v2/piper_protocol_v2.py`; all multi-byte fields
big-endian):

- connect: 0x471 motor enable `[7 (all motors), 0x02 (enable), 0...]` (`EnableArm`, repeated through
  `EnablePiper` until the drivers' low-speed feedback 0x261..0x266 reports them enabled);
- every action: 0x151 `[0x01 CAN command mode, 0x01 MOVE J, speed %, 0x00 position-velocity mode, 0...]`
  (`MotionCtrl_2`, re-sent each time as AgileX's demos do, so the arm returns to CAN control after a
  teach-pendant excursion), then 0x155/0x156/0x157 joint targets as int32 pairs in 0.001 degree
  (`JointCtrl`), then 0x159 gripper `[int32 opening in 0.001 mm, uint16 effort in 0.001 N m,
  0x01 enable, 0x00]` (`GripperCtrl`);
- e-stop: 0x150 `[0x01 quick emergency stop, 0...]` (`EmergencyStop`);
- feedback: 0x2A5/0x2A6/0x2A7 joint positions (int32 pairs, 0.001 degree), 0x2A8 gripper (int32 opening
  in 0.001 mm, int16 effort, uint8 status).

Safety: the interface clips every action to the `ArmSpec` limits in radians; here the integer targets
are clamped once more to the limits expressed in 0.001 degree (rounded inwards), so float-to-int
rounding can never put a target past a limit. The SDK's own optional clamping is left off: one
source of limits (`sim/arms.py`).

Lost feedback: before every observation and action the age of the last joint-feedback frame is
checked against `feedback_timeout` (and the SDK's `isOk()`, which turns False when its CAN reader sees
no frames at all). A stale arm faults: no further motion is commanded (the PiPER stays at its last
target, which the velocity clip kept within one policy period of the last measured pose) and
`RobotFaultError` reports why. The check runs when the robot is used, not on a timer: a caller that
wants a fault reported while idle polls `health()`.

Disconnecting holds and closes the port but leaves the motors enabled: disabling them (0x471 flag
0x01) would drop the arm under gravity. After an e-stop, recover the arm with AgileX's procedure
before connecting again; this backend never sends the 0x150 "resume" code on its own.

SDK behaviours to know about (0.6.2): `C_PiperInterface_V2` is a singleton per CAN channel name (two
robots on one channel share it); `DisconnectPort` stops the reader thread but leaves the SDK's
CAN-monitor thread running (one idle daemon thread per channel ever connected).
"""

from __future__ import annotations

import abc
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from robocoach_skills.constants import OBS_PROPRIO
from robocoach_skills.robots.base import HEALTHY, Robot, RobotFaultError, RobotHealth, register_robot
from robocoach_skills.sim.arms import ArmSpec, get_arm

# Wire units of the PiPER protocol.
MILLIDEGREES_PER_DEGREE = 1000  # joint angles travel in 0.001 degree
MICROMETRES_PER_METRE = 1_000_000  # gripper opening travels in 0.001 mm
MILLI_NM_PER_NM = 1000  # gripper effort travels in 0.001 N m
MAX_GRIPPER_EFFORT = 5.0  # the SDK's documented gripper effort range is 0..5000 (0.001 N m) [N m]

# Argument values of the SDK calls (named after the SDK docstrings of MotionCtrl_2 / GripperCtrl / ...).
CTRL_MODE_CAN = 0x01  # MotionCtrl_2 ctrl_mode: CAN command control mode
MOVE_MODE_J = 0x01  # MotionCtrl_2 move_mode: MOVE J (joint-space targets)
POSITION_VELOCITY_MODE = 0x00  # MotionCtrl_2 is_mit_mode: position-velocity mode (not MIT)
GRIPPER_ENABLE = 0x01  # GripperCtrl gripper_code: enable
GRIPPER_KEEP_ZERO = 0x00  # GripperCtrl set_zero: do not redefine the gripper zero
QUICK_EMERGENCY_STOP = 0x01  # EmergencyStop argument

ENABLE_POLL_PERIOD = 0.01  # pause between EnablePiper() attempts at connect, as AgileX's demos do [s]
FEEDBACK_POLL_PERIOD = 0.01  # pause while waiting for the first feedback at connect [s]
SOCKETCAN = "socketcan"


@dataclass
class PiperConfig:
    """How to reach one PiPER and how fast it may move."""

    channel: str = "can0"  # CAN port (socketcan interface name; any shared name for interface "virtual")
    interface: str = SOCKETCAN  # python-can interface type: "socketcan" on the arm's PC, "virtual" in tests
    bitrate: int = 1_000_000  # PiPER's CAN bitrate [bit/s]
    check_port: bool = True  # socketcan only: refuse a port that is missing, down or at another bitrate
    speed_percent: int = 50  # MOVE J speed as a percentage of the arm's maximum, 1..100
    gripper_effort: float = 1.0  # gripper torque limit [N m], 0..5 (AgileX's demos use 1.0)
    policy_hz: float = 10.0  # action rate [Hz]; the velocity limit is applied over 1/policy_hz
    feedback_timeout: float = 0.2  # no joint feedback for this long -> hold and fault [s]
    connect_timeout: float = 2.0  # wait this long for first feedback and for the motors to enable [s]

    def __post_init__(self) -> None:
        if not self.channel:
            raise ValueError(f"PiperConfig.channel must name a CAN port, got {self.channel!r}")
        if not self.interface:
            raise ValueError(
                f"PiperConfig.interface must name a python-can interface, got {self.interface!r}"
            )
        if self.bitrate <= 0:
            raise ValueError(f"PiperConfig.bitrate must be positive, got {self.bitrate}")
        if not 1 <= self.speed_percent <= 100:
            raise ValueError(f"PiperConfig.speed_percent {self.speed_percent} outside [1, 100]")
        if not 0.0 <= self.gripper_effort <= MAX_GRIPPER_EFFORT:
            raise ValueError(
                f"PiperConfig.gripper_effort {self.gripper_effort} N m outside [0, {MAX_GRIPPER_EFFORT}]"
            )
        if not self.policy_hz > 0:
            raise ValueError(f"PiperConfig.policy_hz must be positive, got {self.policy_hz}")
        if not self.feedback_timeout > 0:
            raise ValueError(f"PiperConfig.feedback_timeout must be positive, got {self.feedback_timeout}")
        if not self.connect_timeout > 0:
            raise ValueError(f"PiperConfig.connect_timeout must be positive, got {self.connect_timeout}")


# ---------------------------------------------------------------------------------------------- units
def rad_to_millideg(angle: float) -> int:
    """Radians -> the protocol's integer 0.001 degree (nearest).

    >>> rad_to_millideg(math.pi / 2)
    90000
    >>> rad_to_millideg(-0.2)
    -11459
    """
    return round(math.degrees(angle) * MILLIDEGREES_PER_DEGREE)


def millideg_to_rad(value: int) -> float:
    """The protocol's 0.001 degree -> radians.

    >>> round(millideg_to_rad(-90000), 6)
    -1.570796
    """
    return math.radians(value / MILLIDEGREES_PER_DEGREE)


def limits_millideg(arm: ArmSpec) -> tuple[tuple[int, int], ...]:
    """Per joint (lowest, highest) integer 0.001-degree target inside the arm's radian limits.

    Rounded inwards, so a clamped target never lies outside the limit it came from.

    >>> limits_millideg(get_arm("piper"))[0]  # J1 limit 2.6179 rad = 149.99461 deg
    (-149994, 149994)
    """
    return tuple(
        (
            math.ceil(math.degrees(lo) * MILLIDEGREES_PER_DEGREE),
            math.floor(math.degrees(hi) * MILLIDEGREES_PER_DEGREE),
        )
        for lo, hi in zip(arm.lower, arm.upper, strict=True)
    )


def joint_targets_millideg(arm: ArmSpec, targets: Sequence[float]) -> tuple[int, ...]:
    """Joint targets [rad] -> protocol integers, each clamped into `limits_millideg(arm)`.

    >>> joint_targets_millideg(get_arm("piper"), [3.0, 0.5, -0.5, 0.0, 0.0, 0.0])
    (149994, 28648, -28648, 0, 0, 0)
    """
    if len(targets) != arm.n_joints:
        raise ValueError(f"{len(targets)} joint targets given; {arm.name} has {arm.n_joints} joints")
    return tuple(
        min(max(rad_to_millideg(q), lo), hi)
        for q, (lo, hi) in zip(targets, limits_millideg(arm), strict=True)
    )


def opening_to_micrometres(opening: float, stroke: float) -> int:
    """Gripper command 0 (closed) .. 1 (fully open) -> opening in 0.001 mm, clamped to the stroke [m].

    >>> opening_to_micrometres(0.5, 0.07)
    35000
    >>> opening_to_micrometres(1.5, 0.07)
    70000
    """
    return round(min(max(opening, 0.0), 1.0) * stroke * MICROMETRES_PER_METRE)


def micrometres_to_opening(value: int, stroke: float) -> float:
    """Measured opening in 0.001 mm -> fraction of the stroke [m], clamped to 0..1.

    >>> micrometres_to_opening(17500, 0.07)
    0.25
    """
    return min(max(value / (stroke * MICROMETRES_PER_METRE), 0.0), 1.0)


def effort_to_milli_nm(effort: float) -> int:
    """Gripper effort [N m] -> the protocol's 0.001 N m.

    >>> effort_to_milli_nm(1.0)
    1000
    """
    return round(effort * MILLI_NM_PER_NM)


def _wait_until(predicate: Callable[[], bool], timeout: float, period: float) -> bool:
    """Poll `predicate` every `period` seconds until it holds (True) or `timeout` passes (False)."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(period)


# ---------------------------------------------------------------------------------------------- backends
class PiperTiming(Protocol):
    """What every PiPER backend's config says about time."""

    policy_hz: float  # action rate [Hz]
    feedback_timeout: float  # no joint feedback for this long -> hold and fault [s]


class PiperBase(Robot):
    """What both PiPER transports share (piper_sdk here, piper_ros): the arm, and when feedback is stale.

    A subclass says how old its last joint feedback is (`_feedback_age`); older than
    `config.feedback_timeout` is stale, and `_feedback_health` then reports the fault.
    """

    def __init__(self, config: PiperTiming):
        super().__init__(get_arm("piper"), 1.0 / config.policy_hz)
        self.config = config

    @abc.abstractmethod
    def _feedback_age(self) -> float:
        """Seconds since the last joint feedback."""

    def _feedback_fresh(self) -> bool:
        return self._feedback_age() <= self.config.feedback_timeout

    def _feedback_health(self, feedback: str) -> RobotHealth:
        """A fault naming `feedback` (what the transport calls its joint feedback) when it is stale."""
        age = self._feedback_age()
        if age > self.config.feedback_timeout:
            return RobotHealth.fault(
                f"lost PiPER {feedback}: none for {age:.3f} s (timeout {self.config.feedback_timeout} s)"
            )
        return HEALTHY


@register_robot("piper_sdk")
class PiperRobot(PiperBase):
    """A PiPER (6 joints + parallel gripper) in CAN command mode, MOVE J, through piper_sdk."""

    config_class = PiperConfig
    config: PiperConfig

    def __init__(self, config: PiperConfig):
        super().__init__(config)
        self._sdk: Any = None  # piper_sdk.C_PiperInterface_V2 while connected

    @property
    def is_connected(self) -> bool:
        return self._sdk is not None

    def _describe(self) -> str:
        return f"{self.name} on {self.config.interface}:{self.config.channel}"

    # ------------------------------------------------------------------ connection
    def _connect(self) -> None:
        # Imported here so the interface (and the sim backend) work where piper-sdk is not installed,
        # e.g. the offboard GPU server.
        from piper_sdk import C_PiperInterface_V2

        cfg = self.config
        sdk = C_PiperInterface_V2(can_name=cfg.channel, judge_flag=False, can_auto_init=False)
        # CreateCanBus (not the constructor) takes the python-can interface type: this is what lets the
        # same code run on socketcan and on python-can's virtual bus.
        try:
            sdk.CreateCanBus(
                cfg.channel,
                bustype=cfg.interface,
                expected_bitrate=cfg.bitrate,
                judge_flag=cfg.check_port and cfg.interface == SOCKETCAN,
            )
        except ConnectionError as error:  # the SDK logs the cause and raises a bare ConnectionError
            raise RobotFaultError(
                f"cannot open CAN port {cfg.interface}:{cfg.channel} ({error}); for socketcan the port must "
                f"exist and be up at {cfg.bitrate} bit/s (piper_sdk's can_activate.sh sets that up)"
            ) from error
        sdk.ConnectPort()
        self._sdk = sdk
        try:
            self._bring_up()
        except BaseException:
            self._disconnect()
            raise

    def _bring_up(self) -> None:
        cfg, sdk = self.config, self._sdk
        if not _wait_until(self._feedback_fresh, cfg.connect_timeout, FEEDBACK_POLL_PERIOD):
            raise RobotFaultError(
                f"no joint feedback from a PiPER on {cfg.interface}:{cfg.channel} within "
                f"{cfg.connect_timeout} s (is the arm powered and the CAN port up at {cfg.bitrate} bit/s?)"
            )
        if not _wait_until(sdk.EnablePiper, cfg.connect_timeout, ENABLE_POLL_PERIOD):
            raise RobotFaultError(
                f"PiPER motors did not report enabled within {cfg.connect_timeout} s "
                f"(driver enable flags: {sdk.GetArmEnableStatus()})"
            )
        self._set_motion_mode()
        self._hold()  # the arm's last target may be stale: make where it is the target

    def _disconnect(self) -> None:
        sdk, self._sdk = self._sdk, None
        if sdk is not None:
            sdk.DisconnectPort()

    # ------------------------------------------------------------------ health and feedback
    def _feedback_age(self) -> float:
        """Seconds since the last joint-feedback frame (CAN receive timestamps are wall-clock)."""
        return time.time() - self._sdk.GetArmJointMsgs().time_stamp

    def _health(self) -> RobotHealth:
        health = self._feedback_health("joint feedback")
        if health.ok and not self._sdk.isOk():
            return RobotHealth.fault("piper_sdk reports its CAN reader receives no frames (isOk() is False)")
        return health

    def _joint_positions(self) -> np.ndarray:
        state = self._sdk.GetArmJointMsgs().joint_state
        raw = (state.joint_1, state.joint_2, state.joint_3, state.joint_4, state.joint_5, state.joint_6)
        return np.array([millideg_to_rad(v) for v in raw], dtype=np.float64)

    def _gripper_opening(self) -> float:
        angle = self._sdk.GetArmGripperMsgs().gripper_state.grippers_angle
        return micrometres_to_opening(angle, self.arm.gripper.stroke)

    def _observe(self) -> dict[str, np.ndarray]:
        proprio = np.append(self._joint_positions(), self._gripper_opening()).astype(np.float32)
        return {OBS_PROPRIO: proprio}

    # ------------------------------------------------------------------ commanding
    def _set_motion_mode(self) -> None:
        self._sdk.MotionCtrl_2(CTRL_MODE_CAN, MOVE_MODE_J, self.config.speed_percent, POSITION_VELOCITY_MODE)

    def _send_joints(self, targets: Sequence[float]) -> None:
        self._sdk.JointCtrl(*joint_targets_millideg(self.arm, targets))

    def _apply_action(self, applied: np.ndarray) -> None:
        n = self.arm.n_joints
        self._set_motion_mode()
        self._send_joints(applied[:n])
        self._sdk.GripperCtrl(
            opening_to_micrometres(float(applied[n]), self.arm.gripper.stroke),
            effort_to_milli_nm(self.config.gripper_effort),
            GRIPPER_ENABLE,
            GRIPPER_KEEP_ZERO,
        )

    def _hold(self) -> None:
        """Target the measured pose; with stale feedback there is no pose to trust, so send nothing."""
        if self._feedback_fresh():
            self._set_motion_mode()
            self._send_joints(self._joint_positions())

    def _estop(self) -> None:
        self._sdk.EmergencyStop(QUICK_EMERGENCY_STOP)

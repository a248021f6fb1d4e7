"""The PiPER backend through the real piper_sdk on python-can's virtual bus, against a fake arm.

Every assertion on what was commanded decodes the raw CAN frames the fake received.
"""

from __future__ import annotations

import math
import struct
import time
import uuid

import numpy as np
import pytest
from fake_piper_arm import (
    EMERGENCY_STOP_ID,
    GRIPPER_CTRL_ID,
    JOINT_CTRL_IDS,
    MOTION_CTRL_2_ID,
    MOTOR_ENABLE_ID,
    FakePiperArm,
    unpack_gripper,
)

from robocoach_skills.constants import OBS_PROPRIO
from robocoach_skills.robots import (
    PiperConfig,
    PiperRobot,
    RobotFaultError,
    RobotNotConnectedError,
    make_robot,
)
from robocoach_skills.robots.piper import rad_to_millideg
from robocoach_skills.sim.arms import get_arm

ARM = get_arm("piper")
HOME_MILLIDEG = tuple(rad_to_millideg(q) for q in ARM.home)
# piper_sdk 0.6.2 opens its buses with python-can's deprecated `bustype=` keyword; not ours to fix.
pytestmark = pytest.mark.filterwarnings("ignore:The 'bustype' argument is deprecated:DeprecationWarning")

FEEDBACK_TIMEOUT = 0.15  # [s], short so the lost-feedback test is quick
SPEED = 37  # an unusual value, so finding it in a frame means it came from the config


@pytest.fixture
def channel() -> str:
    """A fresh virtual CAN channel per test (piper_sdk keeps one interface object per channel name)."""
    return f"vcan-test-{uuid.uuid4().hex[:8]}"


def _robot(channel: str, **overrides) -> PiperRobot:
    config = {
        "channel": channel,
        "interface": "virtual",
        "speed_percent": SPEED,
        "feedback_timeout": FEEDBACK_TIMEOUT,
        "connect_timeout": 1.0,
    }
    return make_robot("piper_sdk", **(config | overrides))


@pytest.fixture
def arm_and_robot(channel):
    with FakePiperArm(channel, joints_millideg=HOME_MILLIDEG, gripper_micrometres=35000) as arm:
        robot = _robot(channel)
        robot.connect()
        assert _wait_for(arm.commanded_joints), "connecting sent no joint command (0x155-0x157)"
        yield arm, robot
        if robot.is_connected:
            robot.disconnect()


def _wait_for(predicate, timeout: float = 1.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def _observes(robot: PiperRobot) -> bool:
    try:
        robot.observe()
    except RobotFaultError:
        return False
    return True


# ------------------------------------------------------------------------------------------- config
@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("channel", ""),
        ("bitrate", 0),
        ("speed_percent", 0),
        ("speed_percent", 101),
        ("gripper_effort", 5.5),
        ("policy_hz", 0.0),
        ("feedback_timeout", 0.0),
        ("connect_timeout", -1.0),
    ],
)
def test_config_rejects_bad_values_quoting_them(field, value):
    with pytest.raises(ValueError, match=f"{field}.*{value}" if value != "" else field):
        PiperConfig(**{field: value})


def test_features_declared_without_connecting():
    robot = _robot("never-opened")
    assert robot.observation_features[OBS_PROPRIO].shape == (7,)
    assert robot.action_features["action"].shape == (7,)
    assert not robot.is_connected
    with pytest.raises(RobotNotConnectedError):
        robot.send_action(np.zeros(7))


# ------------------------------------------------------------------------------------------- connect
def test_connect_enables_all_motors_and_selects_can_move_j(arm_and_robot):
    arm, _ = arm_and_robot
    enable = arm.frames(MOTOR_ENABLE_ID)
    assert enable, "no motor-enable frame (0x471) was sent"
    assert enable[0] == bytes([7, 0x02, 0, 0, 0, 0, 0, 0])  # all motors, enable
    mode = arm.frames(MOTION_CTRL_2_ID)
    assert mode, "no motion-mode frame (0x151) was sent"
    # CAN command mode, MOVE J, speed %, position-velocity (not MIT), no dwell, installation unchanged.
    assert mode[0] == bytes([0x01, 0x01, SPEED, 0x00, 0x00, 0x00, 0x00, 0x00])
    ids = arm.ids()
    assert ids.index(MOTOR_ENABLE_ID) < ids.index(MOTION_CTRL_2_ID) < ids.index(JOINT_CTRL_IDS[0])
    # Connecting holds: the first joint command is the pose the arm reported.
    assert arm.commanded_joints()[0] == HOME_MILLIDEG


def test_connect_without_an_arm_fails_and_leaves_the_robot_disconnected(channel):
    robot = _robot(channel, connect_timeout=0.3)
    with pytest.raises(RobotFaultError, match="no joint feedback"):
        robot.connect()
    assert not robot.is_connected


def test_connect_refuses_a_missing_socketcan_port():
    robot = _robot("rc-no-such-can", interface="socketcan", check_port=True)
    with pytest.raises(RobotFaultError, match="cannot open CAN port socketcan:rc-no-such-can"):
        robot.connect()
    assert not robot.is_connected


def test_connect_fails_when_the_motors_never_enable(channel):
    with FakePiperArm(channel, joints_millideg=HOME_MILLIDEG, answers_enable=False) as arm:
        robot = _robot(channel, connect_timeout=0.3)
        with pytest.raises(RobotFaultError, match="did not report enabled"):
            robot.connect()
        assert not robot.is_connected
        assert len(arm.frames(MOTOR_ENABLE_ID)) > 1  # it kept asking, as AgileX's enable loop does
        assert not arm.frames(JOINT_CTRL_IDS[0])  # and never commanded motion


# ------------------------------------------------------------------------------------------- commands
def test_joint_and_gripper_frames_carry_the_commanded_values(arm_and_robot):
    arm, robot = arm_and_robot
    target = np.array(ARM.home) + np.array([0.1, -0.2, 0.15, -0.3, -0.05, 0.25])  # within one period's reach
    applied = robot.send_action(np.append(target, 0.25))
    np.testing.assert_allclose(applied, np.append(target, 0.25))
    assert _wait_for(lambda: len(arm.frames(GRIPPER_CTRL_ID)) >= 1)

    sent = arm.commanded_joints()[-1]
    assert sent == tuple(round(math.degrees(q) * 1000) for q in target)
    opening, effort, code, set_zero = unpack_gripper(arm.frames(GRIPPER_CTRL_ID)[-1])
    assert (opening, effort, code, set_zero) == (17500, 1000, 0x01, 0x00)  # 0.25 * 70 mm in 0.001 mm
    # The mode frame precedes the joint frames of the action.
    ids = arm.ids()
    last_mode = len(ids) - 1 - ids[::-1].index(MOTION_CTRL_2_ID)
    assert last_mode < len(ids) - 1 - ids[::-1].index(JOINT_CTRL_IDS[0])


def test_targets_beyond_the_limits_arrive_clamped_to_them(channel):
    near_limits = list(HOME_MILLIDEG)
    near_limits[0] = rad_to_millideg(ARM.upper[0] - 0.1)  # J1 0.1 rad below its upper limit
    near_limits[2] = rad_to_millideg(ARM.lower[2] + 0.1)  # J3 0.1 rad above its lower limit
    with FakePiperArm(channel, joints_millideg=near_limits) as arm:
        robot = _robot(channel)
        robot.connect()
        try:
            action = np.array([*(millideg / 1000 for millideg in near_limits), 1.7])
            action = np.radians(action)
            action[0] = ARM.upper[0] + 1.0
            action[2] = ARM.lower[2] - 1.0
            action[6] = 1.7  # gripper beyond fully open
            applied = robot.send_action(action)
            assert applied[0] == pytest.approx(ARM.upper[0])
            assert applied[2] == pytest.approx(ARM.lower[2])
            assert applied[6] == 1.0
            assert _wait_for(lambda: len(arm.frames(GRIPPER_CTRL_ID)) >= 1)
        finally:
            robot.disconnect()
    sent = arm.commanded_joints()[-1]
    assert sent[0] == 149994  # floor(degrees(2.6179) * 1000): the limit, never past it
    assert sent[2] == -169996  # ceil(degrees(-2.967) * 1000)
    assert unpack_gripper(arm.frames(GRIPPER_CTRL_ID)[-1])[0] == 70000  # the 70 mm stroke


def test_nan_action_is_refused_and_nothing_is_sent(arm_and_robot):
    arm, robot = arm_and_robot
    before = len(arm.frames(JOINT_CTRL_IDS[0]))
    with pytest.raises(ValueError, match="non-finite"):
        robot.send_action([0.0, 1.0, float("nan"), 0.0, 0.0, 0.0, 0.5])
    time.sleep(0.05)
    assert len(arm.frames(JOINT_CTRL_IDS[0])) == before


def test_estop_sends_quick_stop_and_latches(arm_and_robot):
    arm, robot = arm_and_robot
    robot.estop()
    assert _wait_for(lambda: arm.frames(EMERGENCY_STOP_ID))
    assert arm.frames(EMERGENCY_STOP_ID)[0] == bytes([0x01, 0, 0, 0, 0, 0, 0, 0])
    with pytest.raises(RobotFaultError, match="emergency stop"):
        robot.send_action(np.append(ARM.home, 0.5))
    assert not robot.health().ok


# ------------------------------------------------------------------------------------------- feedback
def test_feedback_is_decoded_into_radians_and_opening(channel):
    joints = (12345, 67890, -45678, 1000, -2000, 30000)  # 0.001 degree
    with FakePiperArm(channel, joints_millideg=joints, gripper_micrometres=52500, follow_commands=False):
        robot = _robot(channel)
        robot.connect()
        try:
            proprio = robot.observe()[OBS_PROPRIO]
        finally:
            robot.disconnect()
    assert proprio.dtype == np.float32 and proprio.shape == (7,)
    np.testing.assert_allclose(proprio[:6], np.radians(np.array(joints) / 1000), atol=1e-6)
    assert proprio[6] == pytest.approx(0.75)  # 52.5 mm of the 70 mm stroke


def test_lost_feedback_holds_and_reports_within_the_timeout(arm_and_robot):
    arm, robot = arm_and_robot
    robot.send_action(np.append(ARM.home, 0.5))
    assert robot.health().ok

    last_frame = arm.stop_feedback()
    assert _wait_for(lambda: not robot.health().ok, timeout=1.0)
    detected = time.time()
    assert detected - last_frame <= FEEDBACK_TIMEOUT + 0.2  # slack: polling and a loaded CI machine
    assert detected - last_frame > FEEDBACK_TIMEOUT * 0.9  # and not before the timeout
    assert "lost PiPER joint feedback" in robot.health().reason

    commands_before = len(arm.frames(JOINT_CTRL_IDS[0]))
    with pytest.raises(RobotFaultError, match="lost PiPER joint feedback"):
        robot.send_action(np.append(ARM.home, 0.5))
    with pytest.raises(RobotFaultError):
        robot.observe()  # stale measurements are not handed out either
    time.sleep(0.05)
    assert len(arm.frames(JOINT_CTRL_IDS[0])) == commands_before  # held: no motion commanded

    # The fault latches: feedback coming back does not silently resume motion (observing does resume).
    arm.streaming.set()
    assert _wait_for(lambda: _observes(robot))
    with pytest.raises(RobotFaultError, match="lost PiPER joint feedback"):
        robot.send_action(np.append(ARM.home, 0.5))
    assert len(arm.frames(JOINT_CTRL_IDS[0])) == commands_before


def test_reconnecting_clears_a_latched_fault(arm_and_robot):
    arm, robot = arm_and_robot
    robot.estop()
    robot.disconnect()
    robot.connect()
    assert robot.health().ok
    target = np.append(ARM.home, 0.5)
    target[0] += 0.1
    robot.send_action(target)
    assert _wait_for(lambda: arm.commanded_joints()[-1][0] == rad_to_millideg(target[0]))


def test_frame_layout_helpers_match_the_protocol():
    """The fake's decoders read what the protocol says (guards the guards)."""
    assert struct.pack(">ii", 149994, -169996) == bytes.fromhex("000249ea fffd67f4")
    assert unpack_gripper(bytes.fromhex("000088b8 03e8 01 00")) == (35000, 1000, 1, 0)

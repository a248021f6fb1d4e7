"""The robot interface's contract, exercised through the `sim` backend, and the backend registry."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from robocoach_skills.constants import OBS_IMAGE, OBS_PROPRIO
from robocoach_skills.robots import (
    Robot,
    RobotAlreadyConnectedError,
    RobotFaultError,
    RobotHealth,
    RobotNotConnectedError,
    SimRobot,
    make_robot,
    register_robot,
    robot_backends,
)
from robocoach_skills.sim.arms import clip_joint_command


@pytest.fixture
def robot():
    robot = make_robot("sim", robot="piper", render=False)
    robot.connect()
    yield robot
    if robot.is_connected:
        robot.disconnect()


def test_features_are_declared_before_connecting():
    robot = make_robot("sim", robot="franka", image_size=32)
    assert not robot.is_connected
    assert robot.observation_features[OBS_PROPRIO].shape == (8,)
    assert robot.observation_features[OBS_IMAGE].shape == (32, 32, 3)
    assert robot.action_features["action"].shape == (8,)
    assert OBS_IMAGE not in make_robot("sim", robot="franka", render=False).observation_features


@pytest.mark.parametrize(
    "call",
    [
        lambda r: r.observe(),
        lambda r: r.send_action(np.zeros(7)),
        lambda r: r.hold(),
        lambda r: r.estop(),
        lambda r: r.health(),
        lambda r: r.disconnect(),
    ],
)
def test_every_call_needs_a_connection(call):
    robot = make_robot("sim", robot="piper", render=False)
    with pytest.raises(RobotNotConnectedError, match="not connected"):
        call(robot)
    assert issubclass(RobotNotConnectedError, ConnectionError)


def test_connecting_twice_is_refused(robot):
    with pytest.raises(RobotAlreadyConnectedError):
        robot.connect()


def test_observation_matches_the_declared_features(robot):
    obs = robot.observe()
    for key, feature in robot.observation_features.items():
        assert obs[key].shape == feature.shape
        assert obs[key].dtype == np.dtype(feature.dtype)
    np.testing.assert_allclose(obs[OBS_PROPRIO][:6], robot.scene.joint_positions(), atol=1e-6)


def test_send_action_returns_the_clipped_action_it_applied(robot):
    arm = robot.arm
    before = robot.scene.joint_positions()
    wild = np.append(np.asarray(arm.upper) + 1.0, 2.0)  # past every limit, too fast, gripper > 1
    applied = robot.send_action(wild)
    expected = clip_joint_command(arm, wild, before, robot.dt)
    np.testing.assert_array_equal(applied, expected)
    assert not np.allclose(applied, wild)
    assert np.all(applied[:6] <= np.asarray(arm.upper)) and applied[6] == 1.0
    np.testing.assert_array_equal(robot.scene.joint_targets(), applied)  # the scene got exactly that


@pytest.mark.parametrize(
    ("action", "message"),
    [
        ([0.0, 1.0, float("nan"), 0.0, 1.0, 0.0, 0.5], "non-finite"),
        ([0.0] * 6, "6 values"),  # a gripper command is required
        ([0.0] * 8, "8 values"),
    ],
)
def test_malformed_actions_are_refused_and_nothing_moves(robot, action, message):
    targets = robot.scene.joint_targets()
    with pytest.raises(ValueError, match=message):
        robot.send_action(action)
    np.testing.assert_array_equal(robot.scene.joint_targets(), targets)


def test_estop_latches_until_reconnect(robot):
    home = np.append(robot.arm.home, 0.5)
    robot.estop()
    assert not robot.health().ok
    with pytest.raises(RobotFaultError, match="emergency stop") as caught:
        robot.send_action(home)
    assert caught.value.reason == "emergency stop requested"
    assert robot.observe()[OBS_PROPRIO].shape == (7,)  # the operator can still see the arm
    robot.disconnect()
    robot.connect()
    assert robot.health().ok
    robot.send_action(home)


def test_a_latched_fault_leads_what_the_live_checks_see_after_it(robot, monkeypatch):
    """An e-stop ends a backend's control process; the error names the e-stop first, the exit second."""
    robot.estop()
    monkeypatch.setattr(robot, "_health", lambda: RobotHealth.fault("the control process has exited"))
    with pytest.raises(RobotFaultError) as caught:
        robot.send_action(np.append(robot.arm.home, 0.5))
    assert caught.value.reason == "emergency stop requested; since then: the control process has exited"


def test_registry_builds_by_name_and_refuses_unknown_or_duplicate_names():
    assert {"sim", "piper_sdk"} <= set(robot_backends())
    assert isinstance(make_robot("sim", robot="piper", render=False), SimRobot)
    with pytest.raises(ValueError, match=r"unknown robot backend 'ur5'.*sim"):
        make_robot("ur5")
    with pytest.raises(ValueError, match="already registered"):
        register_robot("sim")(type("Impostor", (SimRobot,), {}))
    with pytest.raises(ValueError, match="ur5"):
        make_robot("sim", robot="ur5")
    with pytest.raises(TypeError):
        Robot()  # abstract


def test_robots_package_imports_neither_rclpy_nor_hardware_sdks():
    code = (
        "import sys, robocoach_skills.robots; "
        "sys.exit(sorted({'rclpy', 'piper_sdk'} & set(sys.modules)) or None)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr

"""The `sim_robot` node seen from another process: rates, commands (accepted and refused), reset."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import Image, JointState

from robocoach_msgs.srv import ResetScene
from robocoach_skills.constants import (
    SERVICE_RESET_SCENE,
    TOPIC_CAMERA,
    TOPIC_JOINT_COMMAND,
    TOPIC_JOINT_STATES,
)
from robocoach_skills.nodes.conversions import command_to_joint_state, msg_to_image
from robocoach_skills.nodes.sim_robot import COMMAND_QOS
from robocoach_skills.sim.arms import get_arm
from robocoach_skills.tasks import training_compositions
from ros_harness import call_service, running_node, spin_until

pytestmark = pytest.mark.ros

RATES = {"joint_state_rate_hz": 50.0, "camera_rate_hz": 10.0}
RATE_TOLERANCE = 0.25  # relative; the machines are small and shared
TIMEOUT_S = 20.0


@pytest.fixture(scope="module", params=["franka", "piper"])
def sim_robot(request, ros_probe):
    parameters = {"robot": request.param, **RATES}
    with running_node(ros_probe, "robocoach_skills", "sim_robot", "sim_robot", parameters=parameters) as node:
        yield request.param, node


class Listener:
    """Arrival times and last message of a topic."""

    def __init__(self, probe, msg_type, topic):
        self.times: list[float] = []
        self.last = None
        self.subscription = probe.create_subscription(msg_type, topic, self._on_msg, qos_profile_sensor_data)

    def _on_msg(self, msg):
        self.times.append(time.monotonic())
        self.last = msg

    def rate(self) -> float:
        return (len(self.times) - 1) / (self.times[-1] - self.times[0])


def test_publishes_at_configured_rates(ros_probe, sim_robot):
    robot, _ = sim_robot
    joints = Listener(ros_probe, JointState, TOPIC_JOINT_STATES)
    camera = Listener(ros_probe, Image, TOPIC_CAMERA)
    try:
        spin_until(ros_probe, lambda: joints.times and camera.times, TIMEOUT_S, "first messages")
        start = time.monotonic()
        spin_until(ros_probe, lambda: time.monotonic() - start > 3.0, 10.0, "3 s of traffic")
        assert joints.rate() == pytest.approx(RATES["joint_state_rate_hz"], rel=RATE_TOLERANCE)
        assert camera.rate() == pytest.approx(RATES["camera_rate_hz"], rel=RATE_TOLERANCE)
        arm = get_arm(robot)
        assert list(joints.last.name)[: arm.n_joints] == list(arm.joint_names)
        image = msg_to_image(camera.last)
        assert image.shape == (64, 64, 3) and image.std() > 0  # a real rendered scene, not a blank frame
    finally:
        ros_probe.destroy_subscription(joints.subscription)
        ros_probe.destroy_subscription(camera.subscription)


def _joint_positions(probe) -> np.ndarray:
    listener = Listener(probe, JointState, TOPIC_JOINT_STATES)
    try:
        spin_until(probe, lambda: len(listener.times) >= 2, TIMEOUT_S, "joint states")
        return np.array(listener.last.position)
    finally:
        probe.destroy_subscription(listener.subscription)


def test_valid_command_moves_the_arm(ros_probe, sim_robot):
    robot, _ = sim_robot
    arm = get_arm(robot)
    publisher = ros_probe.create_publisher(JointState, TOPIC_JOINT_COMMAND, COMMAND_QOS)
    try:
        start = _joint_positions(ros_probe)
        target = start.copy()
        target[0] += 0.03  # rad, well inside one policy step of the velocity limit
        spin_until(ros_probe, lambda: publisher.get_subscription_count() > 0, TIMEOUT_S, "command subscriber")
        publisher.publish(command_to_joint_state(target, arm.joint_names))
        spin_until(
            ros_probe,
            lambda: abs(_joint_positions(ros_probe)[0] - target[0]) < 0.01,
            TIMEOUT_S,
            "joint 0 to reach the commanded target",
        )
    finally:
        ros_probe.destroy_publisher(publisher)


@pytest.mark.parametrize(
    ("make_command", "reason"),
    [
        (lambda q, arm: np.where(np.arange(len(q)) == 1, math.nan, q), "non-finite values"),
        (lambda q, arm: q[:-3], "values; "),
        (lambda q, arm: np.append(arm.upper_array + 0.5, q[-1]), "outside limits"),
    ],
    ids=["nan", "wrong_length", "out_of_limits"],
)
def test_bad_commands_are_refused_and_the_arm_holds(ros_probe, sim_robot, make_command, reason):
    robot, node = sim_robot
    arm = get_arm(robot)
    publisher = ros_probe.create_publisher(JointState, TOPIC_JOINT_COMMAND, COMMAND_QOS)
    try:
        spin_until(ros_probe, lambda: publisher.get_subscription_count() > 0, TIMEOUT_S, "command subscriber")
        before = _joint_positions(ros_probe)
        refusals = node.log().count("refused")
        msg = JointState(position=[float(v) for v in make_command(before, arm)])  # positional, no names
        publisher.publish(msg)
        spin_until(
            ros_probe, lambda: node.log().count("refused") > refusals, TIMEOUT_S, "the refusal in the log"
        )
        newest_refusal = [line for line in node.log().splitlines() if "refused" in line][-1]
        assert reason in newest_refusal
        time.sleep(0.5)
        after = _joint_positions(ros_probe)
        assert np.abs(after[: arm.n_joints] - before[: arm.n_joints]).max() < 0.01  # held, rad
    finally:
        ros_probe.destroy_publisher(publisher)


def test_reset_service(ros_probe, sim_robot):
    robot, _ = sim_robot
    response = call_service(
        ros_probe, ResetScene, SERVICE_RESET_SCENE, ResetScene.Request(composition="nope", seed=1)
    )
    assert not response.success
    assert "nope" in response.message
    name = training_compositions(robot)[1].name
    response = call_service(
        ros_probe, ResetScene, SERVICE_RESET_SCENE, ResetScene.Request(composition=name, seed=7)
    )
    assert response.success, response.message
    assert response.region

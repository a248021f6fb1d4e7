"""The `sim_robot` node seen from another process: rates, commands (accepted and refused), reset."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
from robot_topics import command_publisher, joint_positions, listen_to_robot, newest_refusal, nudge_joint_0
from sensor_msgs.msg import JointState

from robocoach_msgs.srv import ResetScene
from robocoach_skills.constants import SERVICE_RESET_SCENE
from robocoach_skills.nodes.conversions import msg_to_image
from robocoach_skills.nodes.sim_robot import COMMAND_QOS
from robocoach_skills.sim.arms import get_arm
from robocoach_skills.tasks import training_compositions
from ros_harness import call_service, running_node

pytestmark = pytest.mark.ros

RATES = {"joint_state_rate_hz": 50.0, "camera_rate_hz": 10.0}
RATE_TOLERANCE = 0.25  # relative; the machines are small and shared


@pytest.fixture(scope="module", params=["franka", "piper"])
def sim_robot(request, ros_probe):
    parameters = {"robot": request.param, **RATES}
    with running_node(ros_probe, "robocoach_skills", "sim_robot", "sim_robot", parameters=parameters) as node:
        yield request.param, node


def test_publishes_at_configured_rates(ros_probe, sim_robot):
    robot, _ = sim_robot
    joints, camera = listen_to_robot(ros_probe)
    assert joints.rate() == pytest.approx(RATES["joint_state_rate_hz"], rel=RATE_TOLERANCE)
    assert camera.rate() == pytest.approx(RATES["camera_rate_hz"], rel=RATE_TOLERANCE)
    arm = get_arm(robot)
    assert list(joints.last.name)[: arm.n_joints] == list(arm.joint_names)
    image = msg_to_image(camera.last)
    assert image.shape == (64, 64, 3) and image.std() > 0  # a real rendered scene, not a blank frame


def test_valid_command_moves_the_arm(ros_probe, sim_robot):
    robot, _ = sim_robot
    arm = get_arm(robot)
    with command_publisher(ros_probe, COMMAND_QOS) as publisher:
        nudge_joint_0(ros_probe, publisher, arm.joint_names)


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
    with command_publisher(ros_probe, COMMAND_QOS) as publisher:
        before = joint_positions(ros_probe)
        refusals = node.log().count("refused")
        msg = JointState(position=[float(v) for v in make_command(before, arm)])  # positional, no names
        publisher.publish(msg)
        assert reason in newest_refusal(ros_probe, node, "refused", refusals)
        time.sleep(0.5)
        after = joint_positions(ros_probe)
        assert np.abs(after[: arm.n_joints] - before[: arm.n_joints]).max() < 0.01  # held, rad


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

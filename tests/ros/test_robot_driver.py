"""The `robot_driver` node seen from another process: the robot topics served through the robot interface.

The driver runs the `sim` backend (rendering, small image); its parameters come from a ROS parameter
file, as the launch files pass them.
"""

from __future__ import annotations

import json
import math
import time

import numpy as np
import pytest
import yaml
from robot_topics import (
    Listener,
    command_publisher,
    joint_positions,
    listen_to_robot,
    newest_refusal,
    nudge_joint_0,
)
from std_msgs.msg import Empty, String

from robocoach_bringup.processes import stop_process
from robocoach_skills.nodes.conversions import command_to_joint_state, msg_to_image
from robocoach_skills.nodes.robot_driver import COMMAND_QOS, STATUS_QOS
from robocoach_skills.sim.arms import get_arm
from ros_harness import running_node, spin_until

pytestmark = pytest.mark.ros

ROBOT = "piper"
ARM = get_arm(ROBOT)
IMAGE_SIZE = 32  # [px]
PARAMETERS = {
    "backend": "sim",
    "robot": ROBOT,
    "backend_options": json.dumps({"robot": ROBOT, "image_size": IMAGE_SIZE, "render": True}),
    "policy_rate_hz": 10.0,
    "joint_state_rate_hz": 20.0,  # sim observations render the camera: keep it light on 2 cores
    "camera_rate_hz": 5.0,
    "command_timeout_s": 1.0,
}
RATE_TOLERANCE = 0.3  # relative; the machines are small and shared
TIMEOUT_S = 20.0


@pytest.fixture(scope="module")
def driver(ros_probe, tmp_path_factory):
    params_file = tmp_path_factory.mktemp("robot_driver") / "params.yaml"
    params_file.write_text(yaml.safe_dump({"robot_driver": {"ros__parameters": PARAMETERS}}))
    extra_args = ["--ros-args", "--params-file", str(params_file)]
    with running_node(
        ros_probe, "robocoach_skills", "robot_driver", "robot_driver", extra_args=extra_args
    ) as node:
        yield node


REFUSED = "refused ("  # how the driver's log starts a refusal's reason


@pytest.fixture
def commands(ros_probe, driver):
    with command_publisher(ros_probe, COMMAND_QOS) as publisher:
        yield publisher


def test_publishes_joint_states_and_camera_at_their_rates(ros_probe, driver):
    joints, camera = listen_to_robot(ros_probe)
    assert joints.rate() == pytest.approx(PARAMETERS["joint_state_rate_hz"], rel=RATE_TOLERANCE)
    assert camera.rate() == pytest.approx(PARAMETERS["camera_rate_hz"], rel=RATE_TOLERANCE)
    assert list(joints.last.name) == [*ARM.joint_names, "gripper"]
    image = msg_to_image(camera.last)
    assert image.shape == (IMAGE_SIZE, IMAGE_SIZE, 3) and image.std() > 0  # a rendered scene


def test_a_command_moves_the_arm(ros_probe, commands):
    nudge_joint_0(ros_probe, commands, ARM.joint_names)


def test_a_nan_command_is_refused_and_the_arm_holds(ros_probe, driver, commands):
    before = joint_positions(ros_probe)
    refusals = driver.log().count(REFUSED)
    command = before.copy()
    command[1] = math.nan
    commands.publish(command_to_joint_state(command, ARM.joint_names))
    assert "non-finite values" in newest_refusal(ros_probe, driver, REFUSED, refusals)
    time.sleep(0.5)
    assert np.abs(joint_positions(ros_probe)[: ARM.n_joints] - before[: ARM.n_joints]).max() < 0.01  # rad


def test_an_out_of_limit_command_is_clipped(ros_probe, driver, commands):
    start = joint_positions(ros_probe)
    refusals = driver.log().count(REFUSED)
    command = start.copy()
    command[0] = ARM.upper[0] + 0.5  # rad past the limit
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:  # streamed, as the executor does
        commands.publish(command_to_joint_state(command, ARM.joint_names))
        time.sleep(0.1)
    after = joint_positions(ros_probe)
    assert after[0] > start[0] + 0.1  # it followed toward the limit (rad)
    assert after[0] <= ARM.upper[0] + 0.01  # and stayed inside it (rad)
    assert driver.log().count(REFUSED) == refusals


def test_estop_latches_a_fault_and_later_commands_are_refused(ros_probe, driver, commands):
    status = Listener(ros_probe, String, "/robot_driver/status", STATUS_QOS)
    estop = ros_probe.create_publisher(Empty, "/robot_driver/estop", COMMAND_QOS)
    try:
        spin_until(ros_probe, lambda: status.last is not None, TIMEOUT_S, "the latched status")
        assert json.loads(status.last.data)["level"] == "OK"
        spin_until(ros_probe, lambda: estop.get_subscription_count() > 0, TIMEOUT_S, "estop subscriber")
        estop.publish(Empty())
        spin_until(
            ros_probe, lambda: json.loads(status.last.data)["level"] == "ERROR", TIMEOUT_S, "the fault"
        )
        assert "emergency stop" in json.loads(status.last.data)["message"]
        before = joint_positions(ros_probe)
        refusals = driver.log().count(REFUSED)
        command = before.copy()
        command[0] += 0.03
        commands.publish(command_to_joint_state(command, ARM.joint_names))
        assert "emergency stop" in newest_refusal(ros_probe, driver, REFUSED, refusals)
        time.sleep(0.5)
        assert abs(joint_positions(ros_probe)[0] - before[0]) < 0.005  # rad: did not move
    finally:
        ros_probe.destroy_subscription(status.subscription)
        ros_probe.destroy_publisher(estop)


def test_ctrl_c_disconnects_the_robot(driver):
    """Runs last: it stops the module's driver."""
    stop_process(driver.process)
    assert driver.process.returncode == 0, driver.log()
    assert "disconnected" in driver.log()


@pytest.mark.skip(
    reason="python-can's `virtual` bus is in-process only, so a driver process cannot reach the fake PiPER "
    "of tests/robots/fake_piper_arm.py; the cross-process interfaces are unavailable here (udp_multicast "
    "needs msgpack, not installed; the kernel has no vcan). tests/robots/test_piper_can.py covers the "
    "piper_sdk backend in-process, and the driver only sees the interface."
)
def test_piper_sdk_backend_on_a_virtual_can_bus():
    """Placeholder so the gap is reported by pytest, not only in the docs."""

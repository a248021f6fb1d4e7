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
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Empty, String

from robocoach_bringup.processes import stop_process
from robocoach_skills.constants import TOPIC_CAMERA, TOPIC_JOINT_COMMAND, TOPIC_JOINT_STATES
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


class Listener:
    """Arrival times and last message of a topic."""

    def __init__(self, probe, msg_type, topic, qos=qos_profile_sensor_data):
        self.times: list[float] = []
        self.last = None
        self.subscription = probe.create_subscription(msg_type, topic, self._on_msg, qos)

    def _on_msg(self, msg):
        self.times.append(time.monotonic())
        self.last = msg

    def rate(self) -> float:
        return (len(self.times) - 1) / (self.times[-1] - self.times[0])


def _joint_positions(probe) -> np.ndarray:
    listener = Listener(probe, JointState, TOPIC_JOINT_STATES)
    try:
        spin_until(probe, lambda: len(listener.times) >= 2, TIMEOUT_S, "joint states")
        return np.array(listener.last.position)
    finally:
        probe.destroy_subscription(listener.subscription)


@pytest.fixture
def commands(ros_probe, driver):
    publisher = ros_probe.create_publisher(JointState, TOPIC_JOINT_COMMAND, COMMAND_QOS)
    spin_until(ros_probe, lambda: publisher.get_subscription_count() > 0, TIMEOUT_S, "command subscriber")
    yield publisher
    ros_probe.destroy_publisher(publisher)


def _newest_refusal(node, refusals_before: int, probe) -> str:
    spin_until(
        probe, lambda: node.log().count("refused (") > refusals_before, TIMEOUT_S, "a refusal in the log"
    )
    return [line for line in node.log().splitlines() if "refused (" in line][-1]


def test_publishes_joint_states_and_camera_at_their_rates(ros_probe, driver):
    joints = Listener(ros_probe, JointState, TOPIC_JOINT_STATES)
    camera = Listener(ros_probe, Image, TOPIC_CAMERA)
    try:
        spin_until(ros_probe, lambda: joints.times and camera.times, TIMEOUT_S, "first messages")
        start = time.monotonic()
        spin_until(ros_probe, lambda: time.monotonic() - start > 3.0, 10.0, "3 s of traffic")
        assert joints.rate() == pytest.approx(PARAMETERS["joint_state_rate_hz"], rel=RATE_TOLERANCE)
        assert camera.rate() == pytest.approx(PARAMETERS["camera_rate_hz"], rel=RATE_TOLERANCE)
        assert list(joints.last.name) == [*ARM.joint_names, "gripper"]
        image = msg_to_image(camera.last)
        assert image.shape == (IMAGE_SIZE, IMAGE_SIZE, 3) and image.std() > 0  # a rendered scene
    finally:
        ros_probe.destroy_subscription(joints.subscription)
        ros_probe.destroy_subscription(camera.subscription)


def test_a_command_moves_the_arm(ros_probe, commands):
    target = _joint_positions(ros_probe)
    target[0] += 0.03  # rad, inside one policy period of the velocity limit
    commands.publish(command_to_joint_state(target, ARM.joint_names))
    spin_until(
        ros_probe,
        lambda: abs(_joint_positions(ros_probe)[0] - target[0]) < 0.01,
        TIMEOUT_S,
        "joint 0 to reach the commanded target",
    )


def test_a_nan_command_is_refused_and_the_arm_holds(ros_probe, driver, commands):
    before = _joint_positions(ros_probe)
    refusals = driver.log().count("refused (")
    command = before.copy()
    command[1] = math.nan
    commands.publish(command_to_joint_state(command, ARM.joint_names))
    assert "non-finite values" in _newest_refusal(driver, refusals, ros_probe)
    time.sleep(0.5)
    assert np.abs(_joint_positions(ros_probe)[: ARM.n_joints] - before[: ARM.n_joints]).max() < 0.01  # rad


def test_an_out_of_limit_command_is_clipped(ros_probe, driver, commands):
    start = _joint_positions(ros_probe)
    refusals = driver.log().count("refused (")
    command = start.copy()
    command[0] = ARM.upper[0] + 0.5  # rad past the limit
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:  # streamed, as the executor does
        commands.publish(command_to_joint_state(command, ARM.joint_names))
        time.sleep(0.1)
    after = _joint_positions(ros_probe)
    assert after[0] > start[0] + 0.1  # it followed toward the limit (rad)
    assert after[0] <= ARM.upper[0] + 0.01  # and stayed inside it (rad)
    assert driver.log().count("refused (") == refusals


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
        before = _joint_positions(ros_probe)
        refusals = driver.log().count("refused (")
        command = before.copy()
        command[0] += 0.03
        commands.publish(command_to_joint_state(command, ARM.joint_names))
        assert "emergency stop" in _newest_refusal(driver, refusals, ros_probe)
        time.sleep(0.5)
        assert abs(_joint_positions(ros_probe)[0] - before[0]) < 0.005  # rad: did not move
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

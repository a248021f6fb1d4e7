"""The franka backend's franka_ros2 transport, as far as the message types installed here allow.

Here: joint_states parsing and the subscription, over real rclpy/DDS (sensor_msgs is a PyPI wheel).
Not here: the arm and gripper commands need control_msgs (FollowJointTrajectory) and franka_msgs
(franka_gripper's Homing/Move/Grasp), which exist only in a ROS 2 install with franka_ros2, so the
end-to-end test runs on a robot workstation only.
"""

from __future__ import annotations

import importlib.util
import time

import numpy as np
import pytest
import rclpy
from rclpy.context import Context
from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import JointState

from robocoach_skills.constants import OBS_PROPRIO
from robocoach_skills.robots import RobotFaultError, make_robot
from robocoach_skills.robots.franka import (
    FR3_FINGER_JOINTS,
    JointStateListener,
    fr3_arm,
    joint_positions_from_state,
)

ARM = fr3_arm()
POSE = (0.1, -0.7, 0.05, -2.3, 0.02, 1.6, 0.8)  # [rad]
FINGERS = (0.012, 0.013)  # [m] each
HAVE_FRANKA_ROS2_INTERFACES = all(importlib.util.find_spec(m) for m in ("control_msgs", "franka_msgs"))


def _state_msg(names, positions) -> JointState:
    return JointState(name=list(names), position=[float(p) for p in positions])


def test_joint_states_parse_by_name_whatever_the_order():
    names = (
        *reversed(ARM.joint_names),
        *FR3_FINGER_JOINTS,
    )  # franka_ros2's aggregated order differs by setup
    msg = _state_msg(names, (*reversed(POSE), *FINGERS))
    np.testing.assert_allclose(joint_positions_from_state(msg.name, msg.position, ARM.joint_names), POSE)
    np.testing.assert_allclose(joint_positions_from_state(msg.name, msg.position, FR3_FINGER_JOINTS), FINGERS)
    gripper_only = _state_msg(FR3_FINGER_JOINTS, FINGERS)  # franka_gripper's own joint_states
    assert joint_positions_from_state(gripper_only.name, gripper_only.position, ARM.joint_names) is None


@pytest.mark.ros
def test_listener_keeps_the_newest_arm_state_received_over_dds():
    topic = f"franka_test_joint_states_{time.monotonic_ns()}"
    listener = JointStateListener(ARM.joint_names, "", topic)
    context = Context()
    rclpy.init(context=context)
    publisher_node = Node("fake_franka_ros2", context=context)
    publisher = publisher_node.create_publisher(JointState, topic, qos_profile_sensor_data)
    listener.start()
    try:
        message = _state_msg((*ARM.joint_names, *FR3_FINGER_JOINTS), (*POSE, *FINGERS))
        deadline = time.monotonic() + 10.0
        while not listener.wait_for_state(0.05):
            assert time.monotonic() < deadline, "no joint_states arrived over DDS within 10 s"
            publisher.publish(message)
        np.testing.assert_allclose(listener.positions, POSE)
        assert listener.finger_width == pytest.approx(sum(FINGERS))
        assert listener.age() < 1.0
        publisher.publish(_state_msg(FR3_FINGER_JOINTS, (0.0, 0.0)))  # a gripper-only message
        time.sleep(0.3)
        np.testing.assert_allclose(listener.positions, POSE)  # arm state untouched by it
    finally:
        listener.close()
        publisher_node.destroy_node()
        context.try_shutdown()


@pytest.mark.skipif(HAVE_FRANKA_ROS2_INTERFACES, reason="control_msgs and franka_msgs are installed here")
def test_connect_names_the_missing_ros_package():
    robot = make_robot("franka", transport="franka_ros2", connect_timeout=1.0)
    with pytest.raises(RobotFaultError, match="control_msgs"):
        robot.connect()
    assert not robot.is_connected


@pytest.mark.hardware_ws
@pytest.mark.skipif(
    not HAVE_FRANKA_ROS2_INTERFACES,
    reason="control_msgs and franka_msgs are not installable here (not on PyPI); needs a ROS 2 workstation "
    "running franka_ros2 (e.g. franka_fr3_moveit_config moveit.launch.py use_fake_hardware:=true)",
)
def test_follows_a_small_step_on_a_running_franka_ros2():
    robot = make_robot("franka", transport="franka_ros2", feedback_timeout=0.5)
    robot.connect()
    try:
        start = robot.observe()[OBS_PROPRIO]
        target = start.copy()
        target[0] += 0.05
        robot.send_action(target)
        deadline = time.monotonic() + 5.0
        while abs(robot.observe()[OBS_PROPRIO][0] - target[0]) > 0.005:
            assert time.monotonic() < deadline, "fr3_arm_controller did not reach a 0.05 rad step in 5 s"
            time.sleep(0.05)
    finally:
        robot.disconnect()

"""The robot topics as a test process sees them: listeners, joint positions, a command publisher.

Shared by the tests of the nodes that serve the robot interface (`sim_robot`, `robot_driver`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
from rclpy.node import Node
from rclpy.qos import QoSProfile, qos_profile_sensor_data
from sensor_msgs.msg import Image, JointState

from robocoach_skills.constants import TOPIC_CAMERA, TOPIC_JOINT_COMMAND, TOPIC_JOINT_STATES
from robocoach_skills.nodes.conversions import command_to_joint_state
from ros_harness import spin_until

TIMEOUT_S = 20.0


class Listener:
    """Arrival times and last message of a topic."""

    def __init__(self, probe: Node, msg_type, topic: str, qos: QoSProfile = qos_profile_sensor_data):
        self.times: list[float] = []
        self.last = None
        self.subscription = probe.create_subscription(msg_type, topic, self._on_msg, qos)

    def _on_msg(self, msg) -> None:
        self.times.append(time.monotonic())
        self.last = msg

    def rate(self) -> float:
        return (len(self.times) - 1) / (self.times[-1] - self.times[0])


def joint_positions(probe: Node, timeout_s: float = TIMEOUT_S) -> np.ndarray:
    """The positions of a fresh joint state (the second one heard, so not a stale latched one)."""
    listener = Listener(probe, JointState, TOPIC_JOINT_STATES)
    try:
        spin_until(probe, lambda: len(listener.times) >= 2, timeout_s, "joint states")
        return np.array(listener.last.position)
    finally:
        probe.destroy_subscription(listener.subscription)


def listen_to_robot(
    probe: Node, seconds: float = 3.0, timeout_s: float = TIMEOUT_S
) -> tuple[Listener, Listener]:
    """Listen to the joint states and the camera for `seconds` of traffic; returns (joints, camera)."""
    joints = Listener(probe, JointState, TOPIC_JOINT_STATES)
    camera = Listener(probe, Image, TOPIC_CAMERA)
    try:
        spin_until(probe, lambda: joints.times and camera.times, timeout_s, "first messages")
        start = time.monotonic()
        spin_until(
            probe, lambda: time.monotonic() - start > seconds, seconds + 7.0, f"{seconds} s of traffic"
        )
        return joints, camera
    finally:
        probe.destroy_subscription(joints.subscription)
        probe.destroy_subscription(camera.subscription)


@contextmanager
def command_publisher(probe: Node, qos: QoSProfile, timeout_s: float = TIMEOUT_S) -> Iterator:
    """A JointState publisher on the command topic, once the robot node subscribes to it."""
    publisher = probe.create_publisher(JointState, TOPIC_JOINT_COMMAND, qos)
    try:
        spin_until(probe, lambda: publisher.get_subscription_count() > 0, timeout_s, "command subscriber")
        yield publisher
    finally:
        probe.destroy_publisher(publisher)


def nudge_joint_0(
    probe: Node, publisher, joint_names, step: float = 0.03, timeout_s: float = TIMEOUT_S
) -> None:
    """Command joint 0 `step` [rad] from where it is and wait until it gets there (within 0.01 rad).

    The default step lies well inside one policy period of the velocity limit.
    """
    target = joint_positions(probe, timeout_s)
    target[0] += step
    publisher.publish(command_to_joint_state(target, joint_names))
    spin_until(
        probe,
        lambda: abs(joint_positions(probe, timeout_s)[0] - target[0]) < 0.01,
        timeout_s,
        "joint 0 to reach the commanded target",
    )


def newest_refusal(probe: Node, node, marker: str, refusals_before: int, timeout_s: float = TIMEOUT_S) -> str:
    """Wait for the node's log to hold more than `refusals_before` lines with `marker`; return the last."""
    spin_until(probe, lambda: node.log().count(marker) > refusals_before, timeout_s, "a refusal in the log")
    return [line for line in node.log().splitlines() if marker in line][-1]

"""The `sim_robot` node's physics runs on the wall clock and a command takes effect when it arrives.

A long policy period (4 s) separates the two behaviours from a driver that follows commands only at
its control ticks, where the arm would not move until the next tick and then jump a whole period.
"""

from __future__ import annotations

import time

import pytest
from robot_topics import command_publisher, joint_positions

from robocoach_skills.nodes.conversions import command_to_joint_state
from robocoach_skills.nodes.sim_robot import COMMAND_QOS
from robocoach_skills.sim.arms import get_arm
from ros_harness import running_node, spin_until

pytestmark = pytest.mark.ros

ROBOT = "piper"
POLICY_PERIOD_S = 4.0
STEP_RAD = 0.1  # joint 0's move, far inside the velocity limit over a 4 s period
FIRST_PIECE_RAD = STEP_RAD / 5  # the servo targets ramp in SceneConfig.interpolation_chunks = 5 pieces


def test_a_command_moves_the_arm_at_once_and_the_ramp_follows_the_wall_clock(ros_probe):
    parameters = {"robot": ROBOT, "policy_rate_hz": 1.0 / POLICY_PERIOD_S, "command_timeout_s": 30.0}
    arm = get_arm(ROBOT)
    with (
        running_node(ros_probe, "robocoach_skills", "sim_robot", "sim_robot", parameters=parameters),
        command_publisher(ros_probe, COMMAND_QOS) as publisher,
    ):
        start = joint_positions(ros_probe)
        target = start.copy()
        target[0] += STEP_RAD
        sent = time.monotonic()
        publisher.publish(command_to_joint_state(target, arm.joint_names))
        moved = lambda: joint_positions(ros_probe)[0] - start[0] > FIRST_PIECE_RAD / 2  # noqa: E731
        spin_until(ros_probe, moved, POLICY_PERIOD_S / 2, "joint 0 to start moving")
        started_after = time.monotonic() - sent
        halfway = joint_positions(ros_probe)[0] - start[0]
        assert halfway < 0.8 * STEP_RAD, f"joint 0 moved {halfway:.3f} rad within {started_after:.2f} s"
        arrived = lambda: abs(joint_positions(ros_probe)[0] - target[0]) < 0.01  # noqa: E731
        spin_until(ros_probe, arrived, 2 * POLICY_PERIOD_S, "joint 0 to reach the target")
        assert time.monotonic() - sent > 0.5 * POLICY_PERIOD_S  # the ramp spans the policy period

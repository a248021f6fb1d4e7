"""`RosRobot` paces the router's steps at the policy rate, and a late step does not start a burst.

A thread stands in for the robot_driver's joint states (50 Hz); the commands go out on the real
command topic to a subscription of the same node.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from sensor_msgs.msg import JointState

from robocoach_skills.constants import TOPIC_JOINT_COMMAND
from robocoach_skills.nodes.conversions import command_to_joint_state
from robocoach_skills.nodes.robot_driver import COMMAND_QOS
from robocoach_skills.nodes.ros_robot import RosRobot
from robocoach_skills.sim.arms import get_arm
from robocoach_skills.tasks import training_compositions

pytestmark = pytest.mark.ros

DT = 0.1  # policy period [s]
STALL_S = 0.35  # a stall of 3.5 periods, as inference or the machine can cause
GAP_TOLERANCE = 0.8  # commands at least this fraction of a period apart (the sleep's jitter)


@pytest.fixture
def robot(ros_probe):
    arm = get_arm("piper")
    commands = ros_probe.create_subscription(JointState, TOPIC_JOINT_COMMAND, lambda _m: None, COMMAND_QOS)
    robot = RosRobot(ros_probe, arm, DT)
    state = command_to_joint_state(np.append(arm.home, 1.0), arm.joint_names)
    stop = threading.Event()

    def publish_joint_states() -> None:  # the driver's joint-state timer
        while not stop.wait(0.02):
            robot._on_joints(state)

    feeder = threading.Thread(target=publish_joint_states, daemon=True)
    feeder.start()
    robot.connect()
    yield robot
    stop.set()
    feeder.join()
    ros_probe.destroy_subscription(commands)


def test_steps_keep_the_policy_rate_and_a_late_one_restarts_the_schedule(robot):
    composition = training_compositions("piper")[0]
    hold = np.append(get_arm("piper").home, 1.0)
    robot.reset(composition, seed=0)
    sent = []
    for k in range(6):
        if k == 3:
            time.sleep(STALL_S)  # inference stalls before the fourth command
        robot.step(hold)
        sent.append(robot.last_command_time)
    gaps = np.diff(sent)
    assert robot.late_ticks >= 1  # the stall; a loaded machine may add one of its own
    assert gaps[2] >= STALL_S  # the late command
    assert np.all(gaps >= GAP_TOLERANCE * DT), gaps  # no burst to make up for the stall
    assert np.all(gaps[3:] < DT + STALL_S / 2), gaps  # and back at the policy rate

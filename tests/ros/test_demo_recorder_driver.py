"""The `demo_recorder` with `backend: driver` as on hardware: it reaches the arm only through a separately
running `robot_driver` and never opens a connection of its own.

The driver runs the `sim` backend, which is the same protocol peer as a hardware driver: joint states and
camera frames out, joint commands in. The test process is the coach and the operator, and it listens
on the command topic to see what reaches the driver.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
from rclpy.action import ActionClient
from robot_topics import Listener
from sensor_msgs.msg import JointState
from std_msgs.msg import String

from robocoach_bringup.processes import node_executable, parameter_args, start_process, stop_process
from robocoach_msgs.action import CollectDemo
from robocoach_msgs.msg import DemoRequest
from robocoach_skills.composition import Subtask
from robocoach_skills.constants import (
    ACTION_COLLECT_DEMO,
    GRIPPER_JOINT,
    TOPIC_DEMO_COMMAND,
    TOPIC_JOINT_COMMAND,
    TOPIC_JOINT_STATES,
    TOPIC_PENDING_REQUESTS,
    TOPIC_TELEOP_KEYS,
)
from robocoach_skills.data.store import EpisodeStore
from robocoach_skills.nodes.conversions import subtask_to_msg
from robocoach_skills.nodes.demo_recorder import INPUT_QOS, LATCHED_QOS
from robocoach_skills.nodes.robot_driver import COMMAND_QOS
from robocoach_skills.sim.arms import get_arm
from ros_harness import running_node, send_goal, spin_until

pytestmark = pytest.mark.ros

ROBOT, TASK, SEED = "piper", "two_buttons", 3
ARM = get_arm(ROBOT)
IMAGE_SIZE = 64  # [px]
DRIVER_PARAMETERS = {
    "backend": "sim",
    "robot": ROBOT,
    "backend_options": json.dumps(
        {"robot": ROBOT, "image_size": IMAGE_SIZE, "composition": TASK, "seed": SEED}
    ),
    "joint_state_rate_hz": 20.0,  # sim joint states render the camera: keep it light on 2 cores
    "camera_rate_hz": 10.0,
}
RECORDER_PARAMETERS = {
    "backend": "driver",
    "robot": ROBOT,
    "image_size": IMAGE_SIZE,
    "stdin_keys": False,
    "feedback_timeout_s": 2.0,  # generous: the test machines are small and shared
    "camera_timeout_s": 2.0,
}
KEYS = "ssss" + "dddd"  # back, then right
KEY_PERIOD_S = 0.12  # slower than the 10 Hz policy: at most one press per key per tick
TIMEOUT_S = 30.0
STATUS_SUCCEEDED = 4  # action_msgs/GoalStatus
REQUEST = DemoRequest(
    request_id="req-driver",
    robot=ROBOT,
    subtask=subtask_to_msg(Subtask("press_button", "red_button")),
    composition=TASK,
    count=1,
    initial_state_seeds=[SEED],
)


def _wait(probe, seconds: float) -> None:
    end = time.monotonic() + seconds
    spin_until(probe, lambda: time.monotonic() >= end, seconds + 1.0, f"{seconds} s")


def test_without_a_driver_the_recorder_fails_naming_the_topic(tmp_path):
    parameters = {**RECORDER_PARAMETERS, "store_dir": str(tmp_path / "store"), "driver_timeout_s": 1.0}
    command = [str(node_executable("robocoach_skills", "demo_recorder")), *parameter_args(parameters)]
    with tempfile.NamedTemporaryFile("w+", suffix=".log") as log:
        process = start_process(command, log)
        try:
            returncode = process.wait(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            stop_process(process)
            raise
        output = Path(log.name).read_text()
    assert returncode != 0
    assert f"no joint state on {TOPIC_JOINT_STATES}" in output and "is a robot_driver for the piper" in output


def test_a_take_is_recorded_through_the_driver(ros_probe, tmp_path):
    commands = Listener(ros_probe, JointState, TOPIC_JOINT_COMMAND, COMMAND_QOS)
    states = Listener(ros_probe, JointState, TOPIC_JOINT_STATES)
    pending = Listener(ros_probe, String, TOPIC_PENDING_REQUESTS, LATCHED_QOS)  # once the station serves
    keys = ros_probe.create_publisher(String, TOPIC_TELEOP_KEYS, INPUT_QOS)
    operator = ros_probe.create_publisher(String, TOPIC_DEMO_COMMAND, INPUT_QOS)
    client = ActionClient(ros_probe, CollectDemo, ACTION_COLLECT_DEMO)
    recorder_parameters = {**RECORDER_PARAMETERS, "store_dir": str(tmp_path / "store")}
    try:
        with (
            running_node(
                ros_probe, "robocoach_skills", "robot_driver", "robot_driver", DRIVER_PARAMETERS
            ) as driver,
            running_node(
                ros_probe, "robocoach_skills", "demo_recorder", "demo_recorder", recorder_parameters
            ),
        ):
            # The node is discoverable while it waits for the driver, before its action server exists.
            spin_until(ros_probe, lambda: pending.times, TIMEOUT_S, "the station's pending list")
            handle, feedback = send_goal(ros_probe, client, CollectDemo.Goal(request=REQUEST), TIMEOUT_S)
            spin_until(ros_probe, lambda: any("'ready'" in f.status for f in feedback), TIMEOUT_S, "set-up")
            operator.publish(String(data="ready"))  # the operator reset: the recorder cannot reset a scene
            spin_until(ros_probe, lambda: any("recording" in f.status for f in feedback), TIMEOUT_S, "take")
            start = states.last.position
            for key in KEYS:
                keys.publish(String(data=key))
                _wait(ros_probe, KEY_PERIOD_S)
            _wait(ros_probe, 0.5)  # the last targets are reached
            operator.publish(String(data="end"))
            spin_until(
                ros_probe, lambda: any("accept (y)" in f.status for f in feedback), TIMEOUT_S, "verdict"
            )
            operator.publish(String(data="accept"))
            result = handle.get_result_async()
            spin_until(ros_probe, result.done, TIMEOUT_S, "result")
            end = states.last.position
            assert "refused" not in driver.log()
    finally:
        client.destroy()
        ros_probe.destroy_subscription(commands.subscription)
        ros_probe.destroy_subscription(states.subscription)
        ros_probe.destroy_subscription(pending.subscription)
        ros_probe.destroy_publisher(keys)
        ros_probe.destroy_publisher(operator)

    assert result.result().status == STATUS_SUCCEEDED
    [answer] = result.result().result.episodes
    assert answer.accepted and answer.initial_state_seed == SEED
    # The recorder's commands reached the driver, and the driver moved the arm. Presses between two policy
    # ticks merge into one command, and a stalled machine ticks less often, so no count per key is asserted.
    assert commands.times and list(commands.last.name)[: ARM.n_joints] == list(ARM.joint_names)
    assert np.abs(np.subtract(end, start)).max() > 0.05
    # The take holds what the driver published: its joint states and its rendered camera frames.
    episode = EpisodeStore(tmp_path / "store").get(answer.episode_id)
    assert episode.metadata["ground_truth"] is False
    assert episode.metadata["joint_names"] == [*ARM.joint_names, GRIPPER_JOINT]
    assert episode.images.shape[1:] == (IMAGE_SIZE, IMAGE_SIZE, 3) and episode.images[-1].std() > 0
    assert np.abs(episode.proprio[-1] - episode.proprio[0]).max() > 0.05
    np.testing.assert_allclose(episode.proprio[0], start, atol=0.01)  # the arm rests until the first key

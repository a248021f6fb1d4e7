"""The `demo_recorder` on its hardware path, as a real process: camera frames from TOPIC_CAMERA and an
operator who sets each take's initial state up and says `ready`.

No backend without a camera and a scene reset runs on this machine, so the station runs the sim PiPER
with `camera_source: topic` and `reset: operator`: the same code a real arm runs. The test process is
the camera driver (constant colours the simulator never renders), the coach and the operator.
"""

from __future__ import annotations

import re
import time

import numpy as np
import pytest
from rclpy.action import ActionClient
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import Image
from std_msgs.msg import String

from robocoach_msgs.action import CollectDemo
from robocoach_msgs.msg import DemoRequest
from robocoach_skills.composition import Subtask
from robocoach_skills.constants import (
    ACTION_COLLECT_DEMO,
    TOPIC_CAMERA,
    TOPIC_DEMO_COMMAND,
    TOPIC_PENDING_REQUESTS,
    TOPIC_TELEOP_KEYS,
)
from robocoach_skills.data.store import EpisodeStore
from robocoach_skills.nodes.conversions import image_to_msg, subtask_to_msg
from robocoach_skills.nodes.demo_recorder import INPUT_QOS, LATCHED_QOS
from robocoach_skills.teleop.session import incomplete_takes
from ros_harness import running_node, send_goal, spin_until

pytestmark = pytest.mark.ros

IMAGE_SIZE = 64
TEAL, ORANGE = (0, 128, 128), (255, 140, 0)  # camera frames: no rendered scene is one flat colour
CAMERA_PERIOD_S = 0.05
CAMERA_TIMEOUT_S = 0.5
TIMEOUT_S = 30.0
STATUS_SUCCEEDED, STATUS_ABORTED = 4, 6  # action_msgs/GoalStatus
MIN_FRAMES = 9  # a take recorded for this many policy steps has frames of both colours to check
REQUEST = DemoRequest(
    request_id="req-hw",
    robot="piper",
    subtask=subtask_to_msg(Subtask("press_button", "green_button")),
    composition="two_buttons",
    count=1,
    initial_state_seeds=[3],
    reason="second press fails in 30% of imagined trials",
)


def _wait(probe, seconds: float) -> None:
    end = time.monotonic() + seconds
    spin_until(probe, lambda: time.monotonic() >= end, seconds + 1.0, f"{seconds} s")


@pytest.fixture
def station(ros_probe, tmp_path):
    """A hardware-path recorder, a camera publishing `camera["colour"]` while `camera["on"]`, the inputs."""
    parameters = {
        "robot": "piper",
        "store_dir": str(tmp_path / "store"),
        "stdin_keys": False,
        "camera_source": "topic",
        "camera_timeout_s": CAMERA_TIMEOUT_S,
        "reset": "operator",
        "image_size": IMAGE_SIZE,
    }
    camera = {"on": True, "colour": TEAL}
    frame_pub = ros_probe.create_publisher(Image, TOPIC_CAMERA, qos_profile_sensor_data)

    def publish_frame() -> None:
        if camera["on"]:
            frame = np.full((IMAGE_SIZE, IMAGE_SIZE, 3), camera["colour"], dtype=np.uint8)
            frame_pub.publish(image_to_msg(frame))

    timer = ros_probe.create_timer(CAMERA_PERIOD_S, publish_frame)
    with running_node(ros_probe, "robocoach_skills", "demo_recorder", "demo_recorder", parameters):
        pending: list[str] = []
        sub = ros_probe.create_subscription(
            String, TOPIC_PENDING_REQUESTS, lambda m: pending.append(m.data), LATCHED_QOS
        )
        keys = ros_probe.create_publisher(String, TOPIC_TELEOP_KEYS, INPUT_QOS)
        command = ros_probe.create_publisher(String, TOPIC_DEMO_COMMAND, INPUT_QOS)
        client = ActionClient(ros_probe, CollectDemo, ACTION_COLLECT_DEMO)
        spin_until(ros_probe, lambda: command.get_subscription_count() > 0, TIMEOUT_S, "command subscriber")
        # The station's latched pending list proves this recorder is discovered: an earlier test's
        # killed recorder can stay "ready" in the graph for a while and swallow the first goal.
        spin_until(ros_probe, lambda: bool(pending), TIMEOUT_S, "pending list")
        try:
            yield {
                "root": tmp_path,
                "camera": camera,
                "pending": pending,
                "client": client,
                "keys": keys,
                "command": command,
            }
        finally:
            client.destroy()
            ros_probe.destroy_subscription(sub)
            for pub in (keys, command, frame_pub):
                ros_probe.destroy_publisher(pub)
            ros_probe.destroy_timer(timer)


def _send(probe, station, topic: str, words: str) -> None:
    for word in words.split():
        station[topic].publish(String(data=word))
        _wait(probe, 0.12)


def _frames_recorded(feedback) -> int:
    """The highest frame count the recorder reported (its status says "frame N" about once a second)."""
    return max((int(m) for f in feedback for m in re.findall(r"frame (\d+)", f.status)), default=0)


def _start_when_ready(probe, station):
    """Send the goal, check the set-up announcement, say `ready`; returns the goal handle and feedback."""
    handle, feedback = send_goal(probe, station["client"], CollectDemo.Goal(request=REQUEST), TIMEOUT_S)
    spin_until(probe, lambda: any("NOW: set up" in p for p in station["pending"]), TIMEOUT_S, "set-up notice")
    notice = next(p for p in station["pending"] if "NOW: set up" in p).splitlines()[0]
    assert "two_buttons (initial-state seed 3)" in notice
    assert "press_button(red_button) already done" in notice and "'ready'" in notice
    spin_until(probe, lambda: any("'ready'" in f.status for f in feedback), TIMEOUT_S, "set-up feedback")
    return handle, feedback


def test_take_waits_for_ready_and_records_the_camera_topic(ros_probe, station):
    handle, feedback = _start_when_ready(ros_probe, station)
    store = EpisodeStore(station["root"] / "store")

    _send(ros_probe, station, "keys", "s s s s")  # without `ready` nothing moves or records ...
    _send(ros_probe, station, "command", "end accept")  # ... and these are stale once it comes
    _wait(ros_probe, 1.0)
    assert not any("recording" in f.status for f in feedback)
    assert len(store) == 0 and incomplete_takes(store.root) == []

    _send(ros_probe, station, "command", "ready")
    spin_until(ros_probe, lambda: any("recording" in f.status for f in feedback), TIMEOUT_S, "recording")
    assert "NOW:" not in station["pending"][-1]  # the set-up notice is gone once the take runs
    _send(ros_probe, station, "keys", "s s s s")
    station["camera"]["colour"] = ORANGE  # every step records the newest frame
    _send(ros_probe, station, "keys", "d d d d")
    # the recorder paces itself and a loaded machine slows it: end once it says it has the frames
    spin_until(ros_probe, lambda: _frames_recorded(feedback) >= MIN_FRAMES, TIMEOUT_S, "frames")
    _send(ros_probe, station, "command", "end")
    spin_until(ros_probe, lambda: any("accept (y)" in f.status for f in feedback), TIMEOUT_S, "verdict")
    _send(ros_probe, station, "command", "accept")
    result = handle.get_result_async()
    spin_until(ros_probe, result.done, TIMEOUT_S, "result")

    assert result.result().status == STATUS_SUCCEEDED
    [answer] = result.result().result.episodes
    assert answer.accepted and answer.initial_state_seed == 3
    images = store.get(answer.episode_id).images  # (T, H, W, 3)
    assert len(images) > MIN_FRAMES  # the steps reported and the end state
    colours = {tuple(int(c) for c in image.reshape(-1, 3)[0]) for image in images}
    assert colours == {TEAL, ORANGE}
    assert all((image == image.reshape(-1, 3)[0]).all() for image in images)  # flat: published, not rendered
    assert tuple(images[0, 0, 0]) == TEAL and tuple(images[-1, 0, 0]) == ORANGE


def test_stale_camera_fails_the_take(ros_probe, station):
    handle, feedback = _start_when_ready(ros_probe, station)
    _send(ros_probe, station, "command", "ready")
    spin_until(ros_probe, lambda: any("recording" in f.status for f in feedback), TIMEOUT_S, "recording")
    station["camera"]["on"] = False
    result = handle.get_result_async()
    spin_until(ros_probe, result.done, TIMEOUT_S, "result")

    assert result.result().status == STATUS_ABORTED
    message = result.result().result.message
    assert "camera frames are stale" in message and TOPIC_CAMERA in message
    store = EpisodeStore(station["root"] / "store")
    assert len(store) == 0 and incomplete_takes(store.root) == []

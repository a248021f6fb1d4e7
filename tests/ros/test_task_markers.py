"""Current-subtask markers: the plain builder, the `task_markers` node as a process, the rviz config."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import pytest
import yaml
from ament_index_python.packages import get_package_share_directory
from visualization_msgs.msg import Marker, MarkerArray

from robocoach_msgs.action import ExecuteTask
from robocoach_msgs.msg import CoachRound, SubtaskProgress
from robocoach_skills.constants import (
    ACTION_EXECUTE_TASK,
    FRAME_WORLD,
    TOPIC_CAMERA,
    TOPIC_COACH_ROUNDS,
    TOPIC_IMAGINED_IMAGE,
    TOPIC_TASK_MARKERS,
)
from robocoach_skills.nodes.task_markers import (
    BAR_LENGTH,
    DONE_RGBA,
    FEEDBACK_SUFFIX,
    FILL_ID,
    RUNNING_RGBA,
    TEXT_ID,
    subtask_markers,
)
from ros_harness import running_node, spin_until

REPUBLISH_S = 0.5  # [s]
TIMEOUT_S = 30.0


def _by_id(array: MarkerArray) -> dict[int, Marker]:
    return {m.id: m for m in array.markers}


def test_progress_bar_grows_with_progress_and_turns_green_when_done():
    running = _by_id(subtask_markers(0, "pick", 0.25, False, 1.5))
    done = _by_id(subtask_markers(0, "pick", 1.0, True, 3.0))
    assert running[FILL_ID].scale.x == pytest.approx(0.25 * BAR_LENGTH)
    assert done[FILL_ID].scale.x == pytest.approx(BAR_LENGTH)
    assert (running[FILL_ID].color.r, running[FILL_ID].color.g) == pytest.approx(RUNNING_RGBA[:2])
    assert (done[FILL_ID].color.r, done[FILL_ID].color.g) == pytest.approx(DONE_RGBA[:2])
    assert running[TEXT_ID].text == "subtask 1: pick  25%  (1.5 s)" and done[TEXT_ID].text.endswith("done")
    assert all(m.header.frame_id == FRAME_WORLD and m.pose.orientation.w == 1.0 for m in running.values())


def test_progress_is_clamped_and_an_empty_bar_stays_valid():
    assert _by_id(subtask_markers(0, "pick", 1.7, False, 0.0))[FILL_ID].scale.x == pytest.approx(BAR_LENGTH)
    assert (
        _by_id(subtask_markers(0, "pick", -1.0, False, 0.0))[FILL_ID].scale.x > 0
    )  # rviz rejects zero scale


@pytest.mark.ros
def test_node_turns_executor_feedback_and_coach_rounds_into_markers(ros_probe):
    received: list[MarkerArray] = []
    latched = ros_probe.create_subscription(
        MarkerArray, TOPIC_TASK_MARKERS, received.append, 10
    )  # volatile subscriber: matches the node's transient-local publisher
    with running_node(ros_probe, "robocoach_skills", "task_markers", "task_markers"):
        feedback_pub = ros_probe.create_publisher(
            ExecuteTask.Impl.FeedbackMessage, ACTION_EXECUTE_TASK + FEEDBACK_SUFFIX, 10
        )
        round_pub = ros_probe.create_publisher(CoachRound, TOPIC_COACH_ROUNDS, 10)
        spin_until(
            ros_probe, lambda: feedback_pub.get_subscription_count() > 0, TIMEOUT_S, "node subscription"
        )
        spin_until(ros_probe, lambda: latched.get_publisher_count() > 0, TIMEOUT_S, "marker publisher")
        message = ExecuteTask.Impl.FeedbackMessage()
        message.feedback = ExecuteTask.Feedback(
            current_index=1,
            current_skill="place",
            progress=SubtaskProgress(index=1, skill="place", progress=0.5, elapsed=2.0),
        )
        _publish_until(ros_probe, feedback_pub, message, lambda: bool(received), "markers")
        markers = _by_id(received[-1])
        assert markers[TEXT_ID].text.startswith("subtask 2: place  50%")
        assert markers[FILL_ID].scale.x == pytest.approx(0.5 * BAR_LENGTH)

        spin_until(ros_probe, lambda: round_pub.get_subscription_count() > 0, TIMEOUT_S, "round subscription")
        summary = CoachRound(round=3, robot="piper", failure_skills=["place"], failure_mass=[0.41])
        summary.allocation_skills, summary.allocation_counts = ["place"], [5]
        count = len(received)
        _publish_until(ros_probe, round_pub, summary, lambda: len(received) > count, "round markers")
        texts = [m.text for m in received[-1].markers]
        assert any(t.startswith("subtask 2: place") for t in texts)  # the subtask stays shown
        assert any("round 3 (piper)" in t and "place 41%" in t and "place x5" in t for t in texts)
    ros_probe.destroy_subscription(latched)


def _publish_until(probe, publisher, message, done, what: str) -> None:
    """Publish `message` every REPUBLISH_S until `done()`: a reader matched a moment ago can miss the
    very first message on a loaded machine, and volatile topics do not replay it."""
    deadline = time.monotonic() + TIMEOUT_S
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {TIMEOUT_S:.1f} s waiting for {what}")
        publisher.publish(message)
        with contextlib.suppress(TimeoutError):
            spin_until(probe, done, REPUBLISH_S, what)


def test_rviz_config_is_installed_and_shows_the_robocoach_topics():
    installed = Path(get_package_share_directory("robocoach_bringup")) / "config" / "robocoach.rviz"
    config = yaml.safe_load(installed.read_text())
    manager = config["Visualization Manager"]
    topics = {
        d["Class"].split("/")[-1] + ":" + d["Topic"]["Value"] for d in manager["Displays"] if "Topic" in d
    }
    assert topics == {
        f"Image:{TOPIC_CAMERA}",
        f"Image:{TOPIC_IMAGINED_IMAGE}",
        f"MarkerArray:{TOPIC_TASK_MARKERS}",
    }
    robot_model = next(d for d in manager["Displays"] if d["Class"] == "rviz_default_plugins/RobotModel")
    assert robot_model["Description Topic"]["Value"] == "/robot_description"
    assert manager["Global Options"]["Fixed Frame"] == FRAME_WORLD

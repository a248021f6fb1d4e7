"""The `demo_recorder` node as a real process, driven from the test process as a coach and an operator would.

The operator's keyboard is the keys topic: a scripted key sequence moves the PiPER's hand over the
red button and presses it; every check reads what the node really wrote (the episode store, the
MCAP bag) or published.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
from rclpy.action import ActionClient
from std_msgs.msg import String

from robocoach_msgs.action import CollectDemo
from robocoach_msgs.msg import DemoEpisode, DemoRequest
from robocoach_skills.composition import Subtask
from robocoach_skills.constants import (
    ACTION_COLLECT_DEMO,
    TOPIC_DEMO_COMMAND,
    TOPIC_DEMO_EPISODES,
    TOPIC_DEMO_REQUESTS,
    TOPIC_PENDING_REQUESTS,
    TOPIC_TELEOP_KEYS,
)
from robocoach_skills.data.rosbag_export import read_mcap
from robocoach_skills.data.store import EpisodeStore
from robocoach_skills.nodes.conversions import subtask_to_msg
from robocoach_skills.nodes.demo_recorder import INPUT_QOS, LATCHED_QOS, OPERATOR_QOS
from robocoach_skills.teleop.session import incomplete_takes
from ros_harness import running_node, send_goal, spin_until

pytestmark = pytest.mark.ros

ROBOT = "piper"
TASK = "two_buttons"
SEED = 3  # hand at (0.21, 0.00, 0.10), red button top at (0.16, -0.10, 0.03) [m]
PRESS_KEYS = "ssss" + "d" * 10 + " " + "f" * 10  # back, right, close the gripper, down onto the button
KEY_PERIOD_S = 0.12  # slower than the 10 Hz policy: at most one press per key per tick
TIMEOUT_S = 30.0
STATUS_SUCCEEDED, STATUS_ABORTED = 4, 6  # action_msgs/GoalStatus


def _request(request_id: str, skill: str = "press_button", obj: str = "red_button") -> DemoRequest:
    return DemoRequest(
        request_id=request_id,
        robot=ROBOT,
        subtask=subtask_to_msg(Subtask(skill, obj)),
        composition=TASK,
        count=1,
        initial_state_seeds=[SEED],
        reason="first fails in 41% of imagined trials",
        priority=0.8,
        round=2,
    )


@pytest.fixture
def station(ros_probe, tmp_path):
    """A demo recorder on the sim PiPER, plus the probe's publishers and the answers it received."""
    parameters = {
        "robot": ROBOT,
        "store_dir": str(tmp_path / "store"),
        "stdin_keys": False,
        "max_take_s": 30.0,
    }
    with running_node(ros_probe, "robocoach_skills", "demo_recorder", "demo_recorder", parameters) as process:
        answers: list[DemoEpisode] = []
        pending: list[str] = []
        subs = [
            ros_probe.create_subscription(DemoEpisode, TOPIC_DEMO_EPISODES, answers.append, OPERATOR_QOS),
            ros_probe.create_subscription(
                String, TOPIC_PENDING_REQUESTS, lambda m: pending.append(m.data), LATCHED_QOS
            ),
        ]
        pubs = {
            "requests": ros_probe.create_publisher(DemoRequest, TOPIC_DEMO_REQUESTS, OPERATOR_QOS),
            "keys": ros_probe.create_publisher(String, TOPIC_TELEOP_KEYS, INPUT_QOS),
            "command": ros_probe.create_publisher(String, TOPIC_DEMO_COMMAND, INPUT_QOS),
        }
        client = ActionClient(ros_probe, CollectDemo, ACTION_COLLECT_DEMO)
        spin_until(ros_probe, client.server_is_ready, TIMEOUT_S, "CollectDemo server")
        spin_until(ros_probe, lambda: pubs["keys"].get_subscription_count() > 0, TIMEOUT_S, "keys subscriber")
        try:
            yield {
                "process": process,
                "root": tmp_path,
                "answers": answers,
                "pending": pending,
                "client": client,
                **pubs,
            }
        finally:
            client.destroy()
            for sub in subs:
                ros_probe.destroy_subscription(sub)
            for pub in pubs.values():
                ros_probe.destroy_publisher(pub)


def _start(probe, station, request: DemoRequest):
    """Send a CollectDemo goal; returns its handle and its feedback messages (arriving as `probe` spins)."""
    return send_goal(probe, station["client"], CollectDemo.Goal(request=request), TIMEOUT_S)


def _type(probe, station, keys: str) -> None:
    for key in keys:
        station["keys"].publish(String(data="space" if key == " " else key))
        end = time.monotonic() + KEY_PERIOD_S
        spin_until(probe, lambda end=end: time.monotonic() >= end, 1.0, "key period")


def test_teleop_take_is_accepted_stored_and_exported(ros_probe, station):
    station["requests"].publish(_request("req-press"))
    spin_until(
        ros_probe, lambda: any("[req-press]" in p for p in station["pending"]), TIMEOUT_S, "pending list"
    )
    listed = next(p for p in station["pending"] if "[req-press]" in p)
    assert "press_button(red_button)" in listed and "41%" in listed and "seeds: 3" in listed

    handle, feedback = _start(ros_probe, station, _request("req-press"))
    spin_until(ros_probe, lambda: any("recording" in f.status for f in feedback), TIMEOUT_S, "recording")
    _type(ros_probe, station, PRESS_KEYS + "\n")  # drive, then Enter ends the take
    spin_until(
        ros_probe, lambda: any("accept (y)" in f.status for f in feedback), TIMEOUT_S, "verdict prompt"
    )
    station["command"].publish(String(data="accept"))
    result = handle.get_result_async()
    spin_until(ros_probe, result.done, TIMEOUT_S, "result")

    assert result.result().status == STATUS_SUCCEEDED
    outcome = result.result().result
    assert outcome.success and len(outcome.episodes) == 1
    answer = outcome.episodes[0]
    assert answer.accepted and answer.request_id == "req-press" and answer.initial_state_seed == SEED
    store = EpisodeStore(station["root"] / "store")
    assert store.ids() == [answer.episode_id]
    episode = store.get(answer.episode_id)
    assert len(episode) == answer.num_frames > len(PRESS_KEYS)
    assert episode.success  # the simulator's ground truth: the button was pressed
    assert episode.composition.subtasks == (Subtask("press_button", "red_button"),)
    assert episode.metadata["request_id"] == "req-press" and episode.metadata["round"] == 2
    assert answer.storage_uri.startswith("file://") and answer.storage_uri.endswith(answer.episode_id)
    bag = read_mcap(station["root"] / "store" / "mcap" / answer.episode_id)
    assert bag.images.shape == episode.images.shape and (bag.actions == episode.actions).all()
    assert answer.preview and answer.preview[0].height == 64
    spin_until(
        ros_probe,
        lambda: any(a.episode_id == answer.episode_id for a in station["answers"]),
        TIMEOUT_S,
        "answer",
    )
    spin_until(ros_probe, lambda: "no pending" in station["pending"][-1], TIMEOUT_S, "request served")


def test_unservable_requests_are_rejected_with_a_reason(ros_probe, station):
    station["requests"].publish(_request("req-juggle", skill="juggle"))
    spin_until(
        ros_probe,
        lambda: any(a.request_id == "req-juggle" for a in station["answers"]),
        TIMEOUT_S,
        "rejection",
    )
    rejection = next(a for a in station["answers"] if a.request_id == "req-juggle")
    assert not rejection.accepted and "juggle" in rejection.rejection_reason

    away = _request("req-away")
    away.composition = "pick_place_bin"  # has no press_button subtask: no initial state to start from
    handle, _ = _start(ros_probe, station, away)
    result = handle.get_result_async()
    spin_until(ros_probe, result.done, TIMEOUT_S, "result")
    assert result.result().status == STATUS_ABORTED
    assert "unreachable initial state" in result.result().result.message
    spin_until(
        ros_probe, lambda: any(a.request_id == "req-away" for a in station["answers"]), TIMEOUT_S, "answer"
    )
    assert len(EpisodeStore(station["root"] / "store")) == 0


def test_recorder_killed_mid_take_leaves_the_store_intact(ros_probe, station):
    _, feedback = _start(ros_probe, station, _request("req-killed"))
    spin_until(ros_probe, lambda: any("recording" in f.status for f in feedback), TIMEOUT_S, "recording")
    _type(ros_probe, station, "ssss")
    os.killpg(station["process"].process.pid, signal.SIGKILL)
    station["process"].process.wait(timeout=TIMEOUT_S)

    store = EpisodeStore(station["root"] / "store")
    assert len(store) == 0 and list(store.iter_meta()) == []
    [take] = incomplete_takes(store.root)
    assert take["request_id"] == "req-killed" and take["seed"] == SEED
    assert store.recover(min_age_s=0) == [store.root / os.path.basename(take["marker"])]

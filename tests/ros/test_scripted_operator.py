"""The `scripted_operator` node as a real process, asked for demos the way the coach asks a human station.

Every check reads what the node really wrote (the episode store) or published (DemoEpisodes on the
operator topic, the CollectDemo result).
"""

from __future__ import annotations

import pytest
from action_msgs.msg import GoalStatus
from rclpy.action import ActionClient

from robocoach_msgs.action import CollectDemo
from robocoach_msgs.msg import DemoEpisode, DemoRequest
from robocoach_skills.composition import Subtask
from robocoach_skills.constants import ACTION_COLLECT_DEMO, TOPIC_DEMO_EPISODES, TOPIC_DEMO_REQUESTS
from robocoach_skills.data.store import EpisodeStore
from robocoach_skills.nodes.conversions import subtask_to_msg
from robocoach_skills.nodes.station import OPERATOR_QOS
from ros_harness import running_node, send_goal, spin_until

pytestmark = pytest.mark.ros

ROBOT = "piper"
TASK = "two_buttons"
PRESS = Subtask("press_button", "red_button")
SEEDS = [3, 8]  # where the coach saw failures concentrate
TIMEOUT_S = 30.0


def _request(request_id: str, subtask: Subtask = PRESS, count: int = 2) -> DemoRequest:
    return DemoRequest(
        request_id=request_id,
        robot=ROBOT,
        subtask=subtask_to_msg(subtask),
        composition=TASK,
        count=count,
        initial_state_seeds=SEEDS,
        reason="first fails in 41% of imagined trials",
        priority=0.8,
        round=2,
    )


@pytest.fixture(scope="module")
def station(ros_probe, tmp_path_factory):
    """One scripted station on the sim PiPER for the module (a node start costs seconds), with its answers."""
    store_dir = tmp_path_factory.mktemp("scripted") / "store"  # missing: the node creates it
    parameters = {
        "robot": ROBOT,
        "store": str(store_dir),
        "image_size": 64,
        "max_takes_per_demo": 3,
        "seed": 0,
    }
    with running_node(ros_probe, "robocoach_skills", "scripted_operator", "scripted_operator", parameters):
        answers: list[DemoEpisode] = []
        sub = ros_probe.create_subscription(DemoEpisode, TOPIC_DEMO_EPISODES, answers.append, OPERATOR_QOS)
        requests = ros_probe.create_publisher(DemoRequest, TOPIC_DEMO_REQUESTS, OPERATOR_QOS)
        client = ActionClient(ros_probe, CollectDemo, ACTION_COLLECT_DEMO)
        spin_until(ros_probe, client.server_is_ready, TIMEOUT_S, "CollectDemo server")
        try:
            yield {"store": store_dir, "answers": answers, "requests": requests, "client": client}
        finally:
            client.destroy()
            ros_probe.destroy_subscription(sub)
            ros_probe.destroy_publisher(requests)


def _collect(probe, station, request: DemoRequest):
    """Send a CollectDemo goal and wait for its end; returns (status, result, feedback messages)."""
    handle, feedback = send_goal(probe, station["client"], CollectDemo.Goal(request=request), TIMEOUT_S)
    done = handle.get_result_async()
    spin_until(probe, done.done, TIMEOUT_S, "result")
    return done.result().status, done.result().result, feedback


def _answers_to(probe, station, request_id: str, n: int) -> list[DemoEpisode]:
    """Wait for `n` DemoEpisodes answering `request_id` on the operator topic."""
    mine = lambda: [a for a in station["answers"] if a.request_id == request_id]  # noqa: E731
    spin_until(probe, lambda: len(mine()) >= n, TIMEOUT_S, f"{n} answers to {request_id}")
    return mine()


def test_requested_demos_are_recorded_stored_and_published(ros_probe, station):
    status, result, feedback = _collect(ros_probe, station, _request("r002-00"))

    assert status == GoalStatus.STATUS_SUCCEEDED and result.success, result.message
    accepted = [e for e in result.episodes if e.accepted]
    assert len(accepted) == 2 and [e.initial_state_seed for e in accepted] == SEEDS  # one demo per seed
    assert all(e.rejection_reason for e in result.episodes if not e.accepted)  # discarded takes say why
    assert any("take 1: seed 3" in f.status for f in feedback)
    store = EpisodeStore(station["store"])
    assert store.info.image_size == (64, 64)
    for answer in accepted:
        episode = store.get(answer.episode_id)
        assert episode.success and episode.seed == answer.initial_state_seed  # the simulator's ground truth
        assert episode.composition.subtasks == (PRESS,) and len(episode) == answer.num_frames
        assert episode.metadata["request_id"] == "r002-00" and episode.metadata["round"] == 2
        assert episode.metadata["operator"] == "scripted"
        assert answer.storage_uri.endswith(answer.episode_id) and answer.preview[0].height == 64
    published = _answers_to(ros_probe, station, "r002-00", len(result.episodes))
    assert [a.episode_id for a in published if a.accepted] == [e.episode_id for e in accepted]


@pytest.mark.parametrize(
    ("request_id", "subtask", "count", "reason"),
    [
        ("r002-01", Subtask("juggle", "red_button"), 2, "unknown skill 'juggle'"),
        ("r002-02", PRESS, 0, "asks for 0 demos"),
    ],
)
def test_unservable_requests_are_rejected_with_a_reason(
    ros_probe, station, request_id, subtask, count, reason
):
    station["requests"].publish(_request(request_id, subtask, count))
    [rejection] = _answers_to(ros_probe, station, request_id, 1)  # answered on the topic at once
    assert not rejection.accepted and reason in rejection.rejection_reason

    status, result, _ = _collect(ros_probe, station, _request(request_id, subtask, count))
    assert status == GoalStatus.STATUS_ABORTED and not result.success
    assert reason in result.message and not result.episodes
    assert all(m.metadata.get("request_id") != request_id for m in EpisodeStore(station["store"]).iter_meta())


def test_a_request_asked_again_records_only_what_the_store_lacks(ros_probe, station):
    """The coach's restart case: a goal for a request some of whose demos are stored already."""
    request_id = "r002-03"

    def stored() -> list[str]:
        return EpisodeStore(station["store"]).ids()

    _, first, _ = _collect(ros_probe, station, _request(request_id, count=1))
    [kept] = [e.episode_id for e in first.episodes if e.accepted]
    before = set(stored())

    status, again, _ = _collect(ros_probe, station, _request(request_id, count=2))
    assert status == GoalStatus.STATUS_SUCCEEDED and again.success, again.message
    accepted = [e for e in again.episodes if e.accepted]
    assert len(accepted) == 2 and accepted[0].episode_id == kept
    assert "1 stored before" in again.message
    [new] = set(stored()) - before  # one take recorded, from the seed after the stored demo's
    assert new == accepted[1].episode_id and accepted[1].initial_state_seed == SEEDS[1]
    assert accepted[0].initial_state_seed == SEEDS[0] and accepted[0].num_frames > 0

    status, third, _ = _collect(ros_probe, station, _request(request_id, count=2))
    assert status == GoalStatus.STATUS_SUCCEEDED and third.success, third.message
    assert [e.episode_id for e in third.episodes] == [e.episode_id for e in accepted]  # nothing recorded
    assert set(stored()) == before | {new}

"""The `world_model` node's Imagine action, from another process: verdicts per trial, feedback, cancel."""

from __future__ import annotations

import pytest
from offboard_models import IMAGE_SIZE, write_offboard_models
from rclpy.action import ActionClient
from sensor_msgs.msg import JointState

from robocoach_msgs.action import Imagine
from robocoach_msgs.msg import FailureRecord
from robocoach_skills.constants import ACTION_IMAGINE, OBS_IMAGE, OBS_PROPRIO
from robocoach_skills.nodes.conversions import composition_to_msg, image_to_msg
from robocoach_skills.sim.scene import SceneConfig, SimScene
from robocoach_skills.tasks import get_composition
from ros_harness import running_node, send_goal, spin_until

pytestmark = pytest.mark.ros

ROBOT, TASK = "piper", "two_buttons"
DEADLINE = 200  # steps: the untrained judge never confirms, so trials end at the goal's horizon
TIMEOUT_S = 60.0
STATUS_SUCCEEDED, STATUS_CANCELED, STATUS_ABORTED = 4, 5, 6  # action_msgs/GoalStatus
SEEDS = (7, 8)


@pytest.fixture(scope="module")
def world_node(ros_probe, tmp_path_factory):
    paths = write_offboard_models(tmp_path_factory.mktemp("offboard"), ROBOT, TASK, DEADLINE)
    parameters = {
        "world_dir": str(paths["world"]),
        "judge_dir": str(paths["judge"]),
        "experts_dir": str(paths["experts"]),
    }
    with running_node(
        ros_probe, "robocoach_world", "world_model", "world_model", parameters=parameters
    ) as node:
        yield node


def _goal(
    num_rollouts: int, horizon: int, frames: bool = False, clips: int = 0, drop_proprio: bool = False
) -> Imagine.Goal:
    composition = get_composition(ROBOT, TASK)
    scene = SimScene(SceneConfig(robot=ROBOT, image_size=IMAGE_SIZE))
    observations = [scene.reset(composition, seed) for seed in SEEDS]
    scene.close()
    proprio = [JointState(position=o[OBS_PROPRIO].tolist()) for o in observations]
    return Imagine.Goal(
        composition=composition_to_msg(composition),
        initial_frames=[image_to_msg(o[OBS_IMAGE]) for o in observations],
        initial_proprio=proprio[:1] if drop_proprio else proprio,
        initial_state_seeds=list(SEEDS),
        num_rollouts=num_rollouts,
        horizon=horizon,
        num_world_seeds=3,
        return_frames=frames,
        failure_clips=clips,
    )


def _send(probe, goal: Imagine.Goal):
    client = ActionClient(probe, Imagine, ACTION_IMAGINE)
    handle, feedback = send_goal(probe, client, goal, TIMEOUT_S)
    return client, handle, feedback


def _result(probe, handle):
    result = handle.get_result_async()
    spin_until(probe, result.done, 3 * TIMEOUT_S, "Imagine result")
    return result.result()


def test_imagine_returns_a_verdict_and_record_per_trial(ros_probe, world_node):
    client, handle, feedback = _send(ros_probe, _goal(num_rollouts=6, horizon=12, frames=True))
    try:
        answer = _result(ros_probe, handle)
        assert answer.status == STATUS_SUCCEEDED, world_node.log()
        result = answer.result
        assert len(result.verdicts) == len(result.records) == 6
        for k, record in enumerate(result.records):
            assert (record.robot, record.composition) == (ROBOT, TASK)
            assert list(record.expert_skills) == ["press_button", "press_button"]
            assert record.source == FailureRecord.SOURCE_IMAGINED
            assert (record.initial_state_id, record.seed) == (k % 2, SEEDS[k % 2])
            # an untrained judge never confirms a press: every trial stops at the horizon in subtask 0
            assert record.first_failed_index == 0 and record.first_failed_skill == "press_button"
        assert list(result.frame_trials) == list(range(6)) and list(result.frame_counts) == [12] * 6
        assert len(result.frames) == len(result.frame_progress) == len(result.frame_subtasks) == 6 * 12
        assert (result.frames[0].height, result.frames[0].width) == (IMAGE_SIZE, IMAGE_SIZE)
        assert set(result.frame_subtasks) == {0} and all(0 <= p <= 1 for p in result.frame_progress)
        spin_until(ros_probe, lambda: feedback and feedback[-1].steps_done == 12, 10.0, "last feedback")
    finally:
        client.destroy()


def test_imagine_returns_the_frames_of_the_first_failures_only(ros_probe, world_node):
    client, handle, _ = _send(ros_probe, _goal(num_rollouts=6, horizon=5, clips=2))
    try:
        answer = _result(ros_probe, handle)
        assert answer.status == STATUS_SUCCEEDED, world_node.log()
        result = answer.result
        # every trial first fails at subtask 0: its first two, one per initial state, come back
        assert list(result.frame_trials) == [0, 1] and list(result.frame_counts) == [5, 5]
        assert len(result.frames) == len(result.frame_progress) == len(result.frame_subtasks) == 10
    finally:
        client.destroy()


def test_imagine_can_be_cancelled(ros_probe, world_node):
    client, handle, feedback = _send(ros_probe, _goal(num_rollouts=64, horizon=400))
    try:
        spin_until(ros_probe, lambda: len(feedback) >= 2, TIMEOUT_S, "feedback")
        cancel = handle.cancel_goal_async()
        spin_until(ros_probe, cancel.done, TIMEOUT_S, "cancel response")
        answer = _result(ros_probe, handle)
        assert answer.status == STATUS_CANCELED
        assert feedback[-1].steps_done < 400
    finally:
        client.destroy()


def test_malformed_goal_is_aborted_with_the_reason_logged(ros_probe, world_node):
    client, handle, _ = _send(ros_probe, _goal(num_rollouts=2, horizon=5, drop_proprio=True))
    try:
        assert _result(ros_probe, handle).status == STATUS_ABORTED
        spin_until(
            ros_probe, lambda: "one initial joint state per initial frame" in world_node.log(), 10.0, "log"
        )
    finally:
        client.destroy()

"""The `skill_executor` node driving the `sim_robot` node, both as real processes, from a third process."""

from __future__ import annotations

import time

import numpy as np
import pytest
from offboard_models import train_scripted_experts
from rclpy.action import ActionClient
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import JointState

from robocoach_msgs.action import ExecuteTask
from robocoach_msgs.srv import GetExperts, LoadAdapter
from robocoach_skills.composition import Composition, Subtask
from robocoach_skills.constants import (
    ACTION_EXECUTE_TASK,
    SERVICE_GET_EXPERTS,
    SERVICE_LOAD_ADAPTER,
    TOPIC_JOINT_STATES,
)
from robocoach_skills.nodes.conversions import composition_to_msg
from robocoach_skills.tasks import get_composition
from ros_harness import call_service, running_node, send_goal, spin_until

pytestmark = pytest.mark.ros

ROBOT = "piper"
TASK = "two_buttons"  # two short press_button subtasks
TIMEOUT_S = 30.0
STATUS_SUCCEEDED, STATUS_CANCELED, STATUS_ABORTED = 4, 5, 6  # action_msgs/GoalStatus


@pytest.fixture(scope="module")
def experts_dir(tmp_path_factory):
    """A small but real experts directory: scripted demos of the task, briefly trained."""
    return train_scripted_experts(tmp_path_factory.mktemp("executor"), ROBOT, TASK)


@pytest.fixture(scope="module")
def robot_graph(ros_probe, experts_dir):
    parameters = {"robot": ROBOT, "composition": TASK}
    with running_node(ros_probe, "robocoach_skills", "sim_robot", "sim_robot", parameters=parameters):
        executor_parameters = {"robot": ROBOT, "experts_dir": str(experts_dir), "deadline_steps": 25}
        with running_node(
            ros_probe, "robocoach_skills", "skill_executor", "skill_executor", parameters=executor_parameters
        ) as executor:
            yield executor


def _send(probe, composition: Composition, seed: int = 3):
    client = ActionClient(probe, ExecuteTask, ACTION_EXECUTE_TASK)
    goal = ExecuteTask.Goal(
        composition=composition_to_msg(composition), initial_state_seed=seed, reset_scene=True
    )
    handle, feedback = send_goal(probe, client, goal, TIMEOUT_S)
    return client, handle, feedback


def test_get_experts_lists_every_skill(ros_probe, robot_graph):
    experts = call_service(ros_probe, GetExperts, SERVICE_GET_EXPERTS, GetExperts.Request()).experts
    assert [(e.skill, e.adapter_version) for e in experts] == [("press_button", 0)]
    assert experts[0].demos_used == 2 and len(experts[0].adapter_hash) == 64


def test_corrupt_adapter_is_refused_and_the_old_version_stays(ros_probe, robot_graph, experts_dir, tmp_path):
    corrupt = tmp_path / "v0001"
    corrupt.mkdir()
    for f in (experts_dir / "adapters" / "press_button" / "v0000").iterdir():
        (corrupt / f.name).write_bytes(f.read_bytes())
    (corrupt / "meta.json").write_text(
        (corrupt / "meta.json").read_text().replace('"version": 0', '"version": 1')
    )
    weights = corrupt / "adapter.safetensors"
    weights.write_bytes(weights.read_bytes()[:-64])  # truncated
    request = LoadAdapter.Request(skill="press_button", version=1, uri=f"file://{corrupt}")
    response = call_service(ros_probe, LoadAdapter, SERVICE_LOAD_ADAPTER, request)
    assert not response.success and response.active_version == 0
    assert "is corrupt or was modified" in response.message
    response = call_service(
        ros_probe, LoadAdapter, SERVICE_LOAD_ADAPTER, LoadAdapter.Request(skill="press_button")
    )
    assert response.success and response.active_version == 0


def test_unknown_skill_aborts_with_the_known_skills(ros_probe, robot_graph):
    composition = Composition(TASK, ROBOT, (Subtask("juggle", "red_cube"),))
    client, handle, _ = _send(ros_probe, composition)
    try:
        result = handle.get_result_async()
        spin_until(ros_probe, result.done, TIMEOUT_S, "result")
        assert result.result().status == STATUS_ABORTED
        assert "juggle" in result.result().result.message and "press_button" in result.result().result.message
    finally:
        client.destroy()


def test_execute_streams_feedback_and_moves_the_arm(ros_probe, robot_graph):
    states = []
    subscription = ros_probe.create_subscription(
        JointState, TOPIC_JOINT_STATES, lambda m: states.append(np.array(m.position)), qos_profile_sensor_data
    )
    client, handle, feedback = _send(ros_probe, get_composition(ROBOT, TASK))
    try:
        result = handle.get_result_async()
        spin_until(ros_probe, result.done, 2 * TIMEOUT_S, "result")
        outcome = result.result().result
        assert result.result().status == STATUS_SUCCEEDED  # the goal ran to an outcome (success or timeout)
        assert outcome.outcome in ("SUCCESS", "TIMEOUT")
        assert len(outcome.subtasks) == 2 and outcome.duration > 0
        assert feedback and feedback[0].current_skill == "press_button"
        assert {f.current_index for f in feedback} <= {0, 1}
        motion = np.abs(np.diff(np.stack(states)[:, :6], axis=0)).sum()
        assert motion > 1e-3  # the expert's commands reached the arm
    finally:
        client.destroy()
        ros_probe.destroy_subscription(subscription)


def test_cancel_holds_the_arm(ros_probe, robot_graph):
    client, handle, feedback = _send(ros_probe, get_composition(ROBOT, TASK))
    try:
        spin_until(ros_probe, lambda: len(feedback) >= 3, TIMEOUT_S, "feedback")
        cancel = handle.cancel_goal_async()
        spin_until(ros_probe, cancel.done, TIMEOUT_S, "cancel response")
        result = handle.get_result_async()
        spin_until(ros_probe, result.done, TIMEOUT_S, "canceled result")
        assert result.result().status == STATUS_CANCELED
        assert result.result().result.outcome == "CANCELED"
        states = []
        subscription = ros_probe.create_subscription(
            JointState,
            TOPIC_JOINT_STATES,
            lambda m: states.append(np.array(m.position)),
            qos_profile_sensor_data,
        )
        time.sleep(0.5)  # let the hold command settle
        states.clear()
        spin_until(ros_probe, lambda: len(states) >= 20, TIMEOUT_S, "joint states after cancel")
        assert np.abs(states[-1][:6] - states[0][:6]).max() < 0.01  # holding still [rad]
        ros_probe.destroy_subscription(subscription)
    finally:
        client.destroy()

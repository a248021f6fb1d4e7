"""Every robocoach_msgs interface crosses a process boundary intact (real DDS, real processes).

The `interface_echo` node runs in its own process: messages come back on `<topic>/reply`, and every
service and action answers with a sample reply carrying the JSON digest of what it received.
"""

from __future__ import annotations

import pytest
from rclpy.action import ActionClient
from rclpy.qos import QoSDurabilityPolicy, QoSProfile, QoSReliabilityPolicy

from robocoach_bringup.interface_check import (
    action_types,
    digest,
    echo_name,
    echo_reply,
    message_types,
    sample_message,
    service_types,
    to_dict,
)
from ros_harness import running_node, spin_until

pytestmark = pytest.mark.ros

QOS = QoSProfile(depth=10, reliability=QoSReliabilityPolicy.RELIABLE, durability=QoSDurabilityPolicy.VOLATILE)
TIMEOUT_S = 15.0


@pytest.fixture(scope="module")
def echo_node(ros_probe):
    with running_node(ros_probe, "robocoach_bringup", "interface_echo", "interface_echo") as process:
        yield process


def test_every_interface_is_covered():
    assert set(message_types()) == {
        "CoachRound", "DemoEpisode", "DemoRequest", "ExpertInfo", "FailureRecord",
        "JudgeVerdict", "Subtask", "SubtaskProgress", "TaskComposition",
    }  # fmt: skip
    assert set(service_types()) == {"GetExperts", "JudgeRollout", "LoadAdapter", "ResetScene"}
    assert set(action_types()) == {"CollectDemo", "ExecuteTask", "Imagine"}


@pytest.mark.parametrize("name", sorted(message_types()))
def test_message_roundtrip(ros_probe, echo_node, name):
    cls = message_types()[name]
    received = []
    publisher = ros_probe.create_publisher(cls, echo_name(name), QOS)
    subscription = ros_probe.create_subscription(cls, echo_name(name) + "/reply", received.append, QOS)
    try:
        spin_until(
            ros_probe,
            lambda: publisher.get_subscription_count() > 0 and subscription.get_publisher_count() > 0,
            TIMEOUT_S,
            f"{name} echo topics to match",
        )
        sent = sample_message(cls, seed=3)
        publisher.publish(sent)
        spin_until(ros_probe, lambda: bool(received), TIMEOUT_S, f"{name} reply")
        assert to_dict(received[0]) == to_dict(sent)
    finally:
        ros_probe.destroy_publisher(publisher)
        ros_probe.destroy_subscription(subscription)


@pytest.mark.parametrize("name", sorted(service_types()))
def test_service_roundtrip(ros_probe, echo_node, name):
    cls = service_types()[name]
    client = ros_probe.create_client(cls, echo_name(name))
    try:
        spin_until(ros_probe, client.service_is_ready, TIMEOUT_S, f"{name} service")
        request = sample_message(cls.Request, seed=5)
        future = client.call_async(request)
        spin_until(ros_probe, future.done, TIMEOUT_S, f"{name} response")
        response = future.result()
        assert to_dict(response) == to_dict(echo_reply(cls.Response, request))
        assert digest(request) in str(to_dict(response))  # the request arrived field for field
    finally:
        ros_probe.destroy_client(client)


def _send_goal(ros_probe, name, cls, seed):
    client = ActionClient(ros_probe, cls, echo_name(name))
    spin_until(ros_probe, client.server_is_ready, TIMEOUT_S, f"{name} action server")
    goal = sample_message(cls.Goal, seed=seed)
    feedback = []
    sent = client.send_goal_async(goal, feedback_callback=lambda msg: feedback.append(msg.feedback))
    spin_until(ros_probe, sent.done, TIMEOUT_S, f"{name} goal acceptance")
    handle = sent.result()
    assert handle.accepted
    return client, goal, handle, feedback


@pytest.mark.parametrize("name", sorted(action_types()))
def test_action_roundtrip(ros_probe, echo_node, name):
    cls = action_types()[name]
    client, goal, handle, feedback = _send_goal(ros_probe, name, cls, seed=7)
    try:
        result = handle.get_result_async()
        spin_until(ros_probe, result.done, TIMEOUT_S, f"{name} result")
        assert result.result().status == 4  # action_msgs/GoalStatus.STATUS_SUCCEEDED
        assert to_dict(result.result().result) == to_dict(echo_reply(cls.Result, goal))
        assert feedback, "no feedback arrived"
        assert to_dict(feedback[0]) == to_dict(echo_reply(cls.Feedback, goal))
    finally:
        client.destroy()


def test_action_cancel(ros_probe):
    """A goal cancelled while the server holds it ends CANCELED, not SUCCEEDED."""
    with running_node(
        ros_probe, "robocoach_bringup", "interface_echo", "interface_echo", parameters={"action_hold_s": 30.0}
    ):
        cls = action_types()["ExecuteTask"]
        client, _goal, handle, feedback = _send_goal(ros_probe, "ExecuteTask", cls, seed=9)
        try:
            spin_until(ros_probe, lambda: bool(feedback), TIMEOUT_S, "first feedback")
            cancel = handle.cancel_goal_async()
            spin_until(ros_probe, cancel.done, TIMEOUT_S, "cancel response")
            result = handle.get_result_async()
            spin_until(ros_probe, result.done, TIMEOUT_S, "canceled result")
            assert result.result().status == 5  # action_msgs/GoalStatus.STATUS_CANCELED
        finally:
            client.destroy()

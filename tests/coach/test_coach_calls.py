"""The coach node's waits for answers over DDS (`nodes.coach.await_answer`, `send_goal`, `goal_outcome`),
with rclpy futures and no graph: a response can be lost for good, so an idempotent request is sent
again, a goal's result is asked for again once its status says it ended, and a goal is sent again only
under its own goal id, so it never runs twice."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest
from action_msgs.msg import GoalStatus
from rclpy.action.client import ClientGoalHandle
from rclpy.task import Future

from robocoach_msgs.action import Imagine
from robocoach_world.nodes.coach import CallFailedError, await_answer, goal_outcome, send_goal


class Server:
    """Answers requests with their number, losing the responses to the first `lost` of them."""

    def __init__(self, lost: int) -> None:
        self.lost = lost
        self.sent: list[Future] = []

    def send(self) -> Future:
        future = Future()
        self.sent.append(future)
        if len(self.sent) > self.lost:
            threading.Timer(0.01, future.set_result, args=(len(self.sent),)).start()
        return future


def test_a_lost_response_is_asked_for_again():
    server, warnings = Server(lost=2), []
    answer = await_answer(server.send, 5.0, "LoadAdapter", 0.05, warnings.append)
    assert answer == 3 and len(server.sent) == 3
    assert warnings == ["LoadAdapter: no answer after 0.05 s, asking again"] * 2


def test_a_request_never_sent_again_fails_at_its_timeout():
    server = Server(lost=1)
    with pytest.raises(CallFailedError, match=r"CollectDemo: no answer within 0 s"):
        await_answer(server.send, 0.2, "CollectDemo", float("inf"), print)
    assert len(server.sent) == 1


def test_a_result_is_asked_for_again_only_once_the_goal_ended():
    server, status = Server(lost=1), {"ended": False}
    threading.Timer(0.3, status.update, kwargs={"ended": True}).start()
    answer = await_answer(server.send, 5.0, "Imagine result", 0.05, lambda _: None, lambda: status["ended"])
    assert answer == 2 and len(server.sent) == 2  # none asked while the goal was running


def test_the_first_answer_wins_when_a_slow_one_arrives_too():
    slow, sent = Future(), []

    def send() -> Future:
        sent.append(slow if not sent else Future())  # only the first request is ever answered
        return sent[-1]

    threading.Timer(0.2, slow.set_result, args=("first",)).start()
    assert await_answer(send, 5.0, "ResetScene", 0.05, lambda _: None) == "first"
    assert len(sent) > 1


class ActionServer:
    """A one-goal-at-a-time action server seen through its client's API. It acts on every goal request
    it receives, but the responses to the first `lost` never reach the client; the first `dropped`
    requests never reach the server. A goal runs at once to success."""

    def __init__(self, lost: int = 0, dropped: int = 0, busy: bool = False) -> None:
        self.lost, self.dropped, self.busy = lost, dropped, busy
        self.requests: list[bytes] = []  # the goal id of every request sent
        self.goals: list[bytes] = []  # the goal ids the server accepted, in order

    def wait_for_server(self, timeout_sec: float) -> bool:
        return True

    def send_goal_async(self, goal, goal_uuid) -> Future:
        goal_id = bytes(goal_uuid.uuid)
        self.requests.append(goal_id)
        future = Future()
        if len(self.requests) <= self.dropped:
            return future
        accepted = not self.busy and goal_id not in self.goals  # a goal id is accepted once
        if accepted:
            self.goals.append(goal_id)
        if len(self.requests) > self.lost:
            response = Imagine.Impl.SendGoalService.Response(accepted=accepted)
            future.set_result(ClientGoalHandle(self, goal_uuid, response))
        return future

    def _get_result_async(self, handle: ClientGoalHandle) -> Future:
        future = Future()
        held = bytes(handle.goal_id.uuid) in self.goals
        status = GoalStatus.STATUS_SUCCEEDED if held else GoalStatus.STATUS_UNKNOWN
        future.set_result(SimpleNamespace(status=status, result="imagined"))
        return future


def _outcome(server: ActionServer):
    return goal_outcome(server, Imagine.Goal(), 5.0, "Imagine", 0.05, lambda _: None)


def test_a_goal_whose_acceptance_was_lost_runs_once_and_its_result_is_fetched():
    server = ActionServer(lost=1)
    handle = send_goal(server, Imagine.Goal(), 5.0, "Imagine", 0.05, lambda _: None)
    assert handle.accepted and bytes(handle.goal_id.uuid) == server.goals[0]
    assert len(server.requests) == 2 and len(set(server.requests)) == 1  # the copy under the same id
    assert server.goals == server.requests[:1]  # the copy was rejected: the goal runs once
    assert _outcome(ActionServer(lost=1)) == (GoalStatus.STATUS_SUCCEEDED, "imagined")


def test_a_goal_request_that_never_arrived_is_accepted_on_its_copy():
    server = ActionServer(dropped=1)
    assert _outcome(server) == (GoalStatus.STATUS_SUCCEEDED, "imagined")
    assert len(server.requests) == 2 and server.goals == server.requests[1:]


@pytest.mark.parametrize("lost", [0, 1])
def test_a_busy_server_is_an_error_whether_or_not_its_first_answer_was_lost(lost):
    server = ActionServer(lost=lost, busy=True)
    with pytest.raises(CallFailedError, match=r"Imagine: goal not accepted \(the server is busy\)"):
        _outcome(server)
    assert server.goals == [] and len(server.requests) == lost + 1


def test_a_goal_never_answered_fails_at_its_timeout():
    server = ActionServer(lost=10**6)
    with pytest.raises(CallFailedError, match=r"Imagine: no answer within 0 s"):
        send_goal(server, Imagine.Goal(), 0.2, "Imagine", 0.05, lambda _: None)
    assert len(server.goals) == 1 and len(set(server.requests)) == 1

"""The coach node's waits for answers over DDS (`nodes.coach.await_answer`), with rclpy futures and no
graph: a response can be lost for good, so an idempotent request is sent again and a goal's result is
asked for again once its status says it ended; a goal itself is never sent twice."""

from __future__ import annotations

import threading

import pytest
from rclpy.task import Future

from robocoach_world.nodes.coach import CallFailedError, await_answer


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
    with pytest.raises(CallFailedError, match=r"send goal: no answer within 0 s"):
        await_answer(server.send, 0.2, "send goal", float("inf"), print)
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

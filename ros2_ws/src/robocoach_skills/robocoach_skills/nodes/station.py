"""What every operator station does on the graph, human (`demo_recorder`) or scripted (`scripted_operator`).

- `DemoRequest`s arrive on the operator topic; each is checked at once (`session.resolve_request`:
  unknown skill, wrong robot, count 0, an initial state nothing can reproduce -> a `DemoEpisode`
  with `accepted=false` and the reason, never dropped) and listed for the operator in the log and
  on a latched text topic, below what the operator must do now, if anything (`announce`).
- A `CollectDemo` goal records takes of one request with the station's session (anything with
  `DemoSession.collect`'s signature), streams feedback, publishes a `DemoEpisode` for every take
  and ends with all of them in the result. One goal runs at a time; others are rejected.
- Goals are idempotent per request id: `DemoRequest.count` is the request's total, the demos the
  session's store already holds for that id are answered from the store (first in the result, not
  published again) and only the rest is recorded. A coach restarted while its killed self's goal
  still ran can ask again without a demo being recorded twice.

A station subclasses `OperatorStation`, declares its parameters, builds its session on `worker`
(the one thread that owns the robot or scene) and calls `serve`.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Protocol

from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.action.server import ServerGoalHandle
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.node import Node
from rclpy.qos import QoSDurabilityPolicy, QoSHistoryPolicy, QoSProfile, QoSReliabilityPolicy
from std_msgs.msg import String

from robocoach_msgs.action import CollectDemo
from robocoach_msgs.msg import DemoEpisode, DemoRequest
from robocoach_skills.constants import (
    ACTION_COLLECT_DEMO,
    TOPIC_DEMO_EPISODES,
    TOPIC_DEMO_REQUESTS,
    TOPIC_PENDING_REQUESTS,
)
from robocoach_skills.data.store import EpisodeMeta, EpisodeStore
from robocoach_skills.nodes.conversions import image_to_msg, msg_to_subtask, subtask_to_msg
from robocoach_skills.robots import RobotError
from robocoach_skills.teleop.session import (
    CancelCheck,
    DemoRequestSpec,
    DemoTarget,
    OnStatus,
    OnTake,
    RequestRejectedError,
    TakeCanceledError,
    TakeResult,
    describe,
    episode_uri,
    resolve_request,
    stored_demos,
)

# Requests and answers must not be lost, and a station started late must still see them: reliable,
# transient local (publishers on these topics must offer transient local too).
OPERATOR_QOS = QoSProfile(
    depth=100,
    reliability=QoSReliabilityPolicy.RELIABLE,
    durability=QoSDurabilityPolicy.TRANSIENT_LOCAL,
    history=QoSHistoryPolicy.KEEP_LAST,
)
# The pending-request list: only the latest matters, and a UI started later must get it.
LATCHED_QOS = QoSProfile(
    depth=1,
    reliability=QoSReliabilityPolicy.RELIABLE,
    durability=QoSDurabilityPolicy.TRANSIENT_LOCAL,
    history=QoSHistoryPolicy.KEEP_LAST,
)


class DemoCollector(Protocol):
    """A station's recording session (`session.DemoSession`, `scripted.ScriptedSession`)."""

    store: EpisodeStore  # where accepted takes go

    def collect(
        self, target: DemoTarget, on_status: OnStatus, canceled: CancelCheck, on_take: OnTake | None = None
    ) -> list[TakeResult]: ...


def request_from_msg(msg: DemoRequest) -> DemoRequestSpec:
    return DemoRequestSpec(
        request_id=msg.request_id,
        robot=msg.robot,
        subtask=msg_to_subtask(msg.subtask),
        composition=msg.composition,
        count=int(msg.count),
        seeds=tuple(int(s) for s in msg.initial_state_seeds),
        reason=msg.reason,
        priority=float(msg.priority),
        round=int(msg.round),
    )


class OperatorStation(Node):
    """Serves the operator topic and the CollectDemo action for one recording session; see the module doc."""

    def __init__(self, node_name: str) -> None:
        super().__init__(node_name)
        # One thread owns the robot or scene: a sim renders through an EGL context bound to the
        # thread that created it, and executor threads change from goal to goal.
        self.worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="robot")
        self._pending: dict[str, tuple[DemoTarget, int]] = {}  # request id -> (target, accepted so far)
        self._notice = ""  # what the operator must do now (e.g. set the scene up), first on the list
        self._lock = threading.Lock()
        self._busy = False

    def serve(self, robot: str, session: DemoCollector) -> None:
        """Start answering requests for `robot` (an embodiment name) with `session`."""
        self._robot, self._session = robot, session
        self._episode_pub = self.create_publisher(DemoEpisode, TOPIC_DEMO_EPISODES, OPERATOR_QOS)
        self._pending_pub = self.create_publisher(String, TOPIC_PENDING_REQUESTS, LATCHED_QOS)
        self.create_subscription(
            DemoRequest,
            TOPIC_DEMO_REQUESTS,
            self._on_request,
            OPERATOR_QOS,
            callback_group=ReentrantCallbackGroup(),
        )
        self._action_server = ActionServer(
            self,
            CollectDemo,
            ACTION_COLLECT_DEMO,
            execute_callback=self._execute,
            goal_callback=self._on_goal,
            cancel_callback=lambda _goal: CancelResponse.ACCEPT,
            callback_group=MutuallyExclusiveCallbackGroup(),
        )
        self._publish_pending()

    # ------------------------------------------------------------------ requests
    def _check(self, msg: DemoRequest) -> DemoTarget:
        """The request resolved against this station; RequestRejectedError says why it cannot be served."""
        try:
            return resolve_request(request_from_msg(msg), self._robot)
        except ValueError as error:  # a malformed message, e.g. parameter names and values of unequal length
            raise RequestRejectedError(str(error)) from None

    def _list(self, target: DemoTarget) -> int:
        """Put `target` on the pending list (keeping its accepted count, at least `target.done`); returns
        that count."""
        request_id = target.request.request_id
        with self._lock:
            accepted = max(self._pending.get(request_id, (target, 0))[1], target.done)
            self._pending[request_id] = (target, accepted)
        self._publish_pending()
        return accepted

    def _on_request(self, msg: DemoRequest) -> None:
        try:
            target = self._check(msg)
        except RequestRejectedError as error:
            self._reject(msg, error.reason)
            return
        self.get_logger().info(f"demo request: {describe(target, self._list(target))}")

    def _reject(self, msg: DemoRequest, reason: str) -> DemoEpisode:
        """Answer a request that cannot be served, so the coach never waits for it."""
        with self._lock:
            self._pending.pop(msg.request_id, None)
        self.get_logger().warning(f"demo request {msg.request_id!r} rejected: {reason}")
        answer = self._episode_msg(msg, subtask=msg.subtask, accepted=False, rejection_reason=reason)
        self._episode_pub.publish(answer)
        self._publish_pending()
        return answer

    def _count_accepted(self, request_id: str) -> None:
        with self._lock:
            if request_id in self._pending:
                target, accepted = self._pending[request_id]
                self._pending[request_id] = (target, accepted + 1)
        self._publish_pending()

    def _served(self, request_id: str) -> None:
        with self._lock:
            self._pending.pop(request_id, None)
        self._publish_pending()

    def announce(self, text: str) -> None:
        """Put `text` (what the operator must do now) at the top of the pending list; "" removes it."""
        with self._lock:
            self._notice = f"NOW: {text}" if text else ""
        self._publish_pending()

    def _publish_pending(self) -> None:
        with self._lock:
            lines = [self._notice] if self._notice else []
            lines += [describe(target, accepted) for target, accepted in self._pending.values()]
        text = "\n".join(lines) if lines else "no pending demo requests"
        self._pending_pub.publish(String(data=text))

    # ------------------------------------------------------------------ CollectDemo
    def _on_goal(self, goal: CollectDemo.Goal) -> GoalResponse:
        if self._busy:
            self.get_logger().warning("CollectDemo goal rejected: a collection is already running")
            return GoalResponse.REJECT
        return GoalResponse.ACCEPT

    def _execute(self, goal_handle: ServerGoalHandle) -> CollectDemo.Result:
        self._busy = True
        try:
            return self._collect(goal_handle)
        finally:
            self._busy = False

    def _collect(self, goal_handle: ServerGoalHandle) -> CollectDemo.Result:
        msg = goal_handle.request.request
        result = CollectDemo.Result()

        def on_status(text: str, accepted: int) -> None:
            goal_handle.publish_feedback(
                CollectDemo.Feedback(episodes_done=accepted, episodes_requested=msg.count, status=text)
            )
            self.get_logger().info(f"[{msg.request_id}] {text}")

        def on_take(take: TakeResult) -> None:
            answer = self._answer(msg, take)
            result.episodes.append(answer)
            self._episode_pub.publish(answer)
            if take.accepted:
                self._count_accepted(msg.request_id)
            where = f"{take.episode_id}" + (f" ({take.bag})" if take.bag else "")
            verdict = f"accepted as {where}" if take.accepted else take.rejection_reason
            self.get_logger().info(f"[{msg.request_id}] take of {len(take.episode)} frames: {verdict}")

        def canceled() -> bool:
            return goal_handle.is_cancel_requested

        try:
            target = self._check(msg)
            stored = stored_demos(self._session.store, msg.request_id)
            result.episodes.extend(self._stored_answer(msg, meta) for meta in stored)
            target = replace(target, done=len(stored))
            self.get_logger().info(f"collecting: {describe(target, self._list(target))}")
            takes = self.worker.submit(self._session.collect, target, on_status, canceled, on_take).result()
        except TakeCanceledError:
            result.message = "canceled by the client; the take in progress was discarded"
            goal_handle.canceled()
            return result
        except RequestRejectedError as error:
            result.message = self._reject(msg, error.reason).rejection_reason
            goal_handle.abort()
            return result
        except RobotError as error:  # the robot faulted: the take in progress is discarded
            result.message = f"robot error, the take in progress was discarded: {error}"
            self.get_logger().error(f"[{msg.request_id}] {result.message}")
            goal_handle.abort()
            return result
        accepted = len(stored) + sum(t.accepted for t in takes)
        result.success = accepted >= msg.count
        result.message = (
            f"{accepted}/{msg.count} demos accepted ({len(stored)} stored before) in {len(takes)} takes"
        )
        if result.success:
            self._served(msg.request_id)
        self.get_logger().info(f"[{msg.request_id}] {result.message}")
        goal_handle.succeed()
        return result

    def _answer(self, request: DemoRequest, take: TakeResult) -> DemoEpisode:
        return self._episode_msg(
            request,
            episode_id=take.episode_id,
            subtask=subtask_to_msg(take.episode.composition.subtasks[0]),
            initial_state_seed=take.seed,
            num_frames=len(take.episode),
            duration=take.duration,
            storage_uri=take.storage_uri,
            accepted=take.accepted,
            rejection_reason=take.rejection_reason,
            preview=[image_to_msg(image) for image in take.preview],
        )

    def _stored_answer(self, request: DemoRequest, meta: EpisodeMeta) -> DemoEpisode:
        """An accepted demo stored by an earlier goal for `request`, as its take was answered then."""
        return self._episode_msg(
            request,
            episode_id=meta.episode_id,
            subtask=subtask_to_msg(meta.composition.subtasks[0]),
            initial_state_seed=meta.seed,
            num_frames=meta.length,
            duration=(meta.length - 1) / meta.fps,
            storage_uri=episode_uri(self._session.store, meta.episode_id),
            accepted=True,
        )

    def _episode_msg(self, request: DemoRequest, **fields) -> DemoEpisode:
        """A stamped DemoEpisode answering `request`."""
        answer = DemoEpisode(request_id=request.request_id, robot=request.robot, **fields)
        answer.header.stamp = self.get_clock().now().to_msg()
        return answer

    def destroy_node(self) -> None:
        self.worker.shutdown()
        super().destroy_node()

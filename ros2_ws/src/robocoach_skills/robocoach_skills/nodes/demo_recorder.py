"""`demo_recorder` node: an operator station recording teleoperated demos of the subtasks the coach asks for.

- `DemoRequest`s arrive on the operator topic; each is checked at once (unknown skill, wrong robot,
  unreachable initial state -> a `DemoEpisode` with `accepted=false` and the reason, never dropped)
  and listed for the operator in the log and on a latched text topic.
- A `CollectDemo` goal (from the coach, or the operator with `ros2 action send_goal`) records takes
  of one request through the robot interface from the teleop source (`teleop.session`), streams
  feedback, publishes a `DemoEpisode` for every take and ends with all of them in the result.
- The operator drives the arm from the keyboard (stdin in raw mode when the node has a terminal, or
  the keys topic from anywhere), a leader arm or a spacemouse, and ends/accepts/discards takes with
  keys or on the command topic (`end`, `accept`, `discard`, `open`, `close`, `toggle_gripper`).
"""

from __future__ import annotations

import sys
import termios
import threading
import tty
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from geometry_msgs.msg import Twist
from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.node import Node
from rclpy.qos import QoSDurabilityPolicy, QoSHistoryPolicy, QoSProfile, QoSReliabilityPolicy
from sensor_msgs.msg import JointState
from std_msgs.msg import String

from robocoach_msgs.action import CollectDemo
from robocoach_msgs.msg import DemoEpisode, DemoRequest
from robocoach_skills.constants import (
    ACTION_COLLECT_DEMO,
    TOPIC_DEMO_COMMAND,
    TOPIC_DEMO_EPISODES,
    TOPIC_DEMO_REQUESTS,
    TOPIC_PENDING_REQUESTS,
    TOPIC_TELEOP_KEYS,
    TOPIC_TELEOP_LEADER,
    TOPIC_TELEOP_TWIST,
)
from robocoach_skills.data.store import EpisodeStore, StoreInfo
from robocoach_skills.nodes.conversions import (
    image_to_msg,
    joint_state_to_command,
    msg_to_subtask,
    subtask_to_msg,
)
from robocoach_skills.nodes.spin import spin_node
from robocoach_skills.robots import RobotError, make_robot
from robocoach_skills.teleop.session import (
    DemoRequestSpec,
    DemoSession,
    DemoTarget,
    RequestRejectedError,
    SessionConfig,
    TakeCanceledError,
    TakeResult,
    describe,
    export_missing_bags,
    incomplete_takes,
    resolve_request,
)
from robocoach_skills.teleop.sources import (
    COMMANDS,
    KEY_HELP,
    CartesianDriver,
    KeyboardTeleop,
    LeaderArmTeleop,
    TwistTeleop,
    key_command,
)

# Requests and answers must not be lost, and a station started late must still see them: reliable,
# transient local (publishers on these topics must offer transient local too).
OPERATOR_QOS = QoSProfile(
    depth=100,
    reliability=QoSReliabilityPolicy.RELIABLE,
    durability=QoSDurabilityPolicy.TRANSIENT_LOCAL,
    history=QoSHistoryPolicy.KEEP_LAST,
)
LATCHED_QOS = QoSProfile(
    depth=1,
    reliability=QoSReliabilityPolicy.RELIABLE,
    durability=QoSDurabilityPolicy.TRANSIENT_LOCAL,
    history=QoSHistoryPolicy.KEEP_LAST,
)
INPUT_QOS = QoSProfile(
    depth=50, reliability=QoSReliabilityPolicy.RELIABLE, history=QoSHistoryPolicy.KEEP_LAST
)
SOURCES = ("keyboard", "leader_arm", "spacemouse")


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


class DemoRecorder(Node):
    def __init__(self) -> None:
        super().__init__("demo_recorder")
        declare = self.declare_parameter
        robot_name = declare("robot", "franka").value  # embodiment: franka or piper
        backend = declare("backend", "sim").value  # robot backend (robots.make_robot); takes need a camera
        image_size = declare("image_size", 64).value  # sim camera image edge [px]
        policy_rate = declare("policy_rate_hz", 10.0).value  # recording and command rate [Hz]
        store_dir = declare("store_dir", "").value  # episode store (created if missing)
        bag_dir = declare("bag_dir", "").value  # MCAP bags of accepted takes; "" = <store_dir>/mcap
        source = declare("source", "keyboard").value  # keyboard | leader_arm | spacemouse
        stdin_keys = declare("stdin_keys", True).value  # read keys from the terminal when there is one
        config = SessionConfig(
            max_take_s=declare("max_take_s", 60.0).value,  # [s]
            verdict_timeout_s=declare("verdict_timeout_s", 300.0).value,  # [s]
            auto_accept=declare("auto_accept", False).value,  # sim: accept iff ground-truth success
            max_takes_per_demo=declare("max_takes_per_demo", 3).value,
            operator=declare("operator", "teleop").value,  # name recorded with every episode
        )
        if not store_dir:
            raise ValueError("parameter store_dir is required (the episode store accepted demos go to)")
        if source not in SOURCES:
            raise ValueError(f"parameter source {source!r} is not one of {SOURCES}")
        if backend != "sim":  # hardware backends are configured by their own config defaults
            self.robot = make_robot(backend)
        else:
            self.robot = make_robot("sim", robot=robot_name, image_size=image_size, policy_hz=policy_rate)
        store = EpisodeStore.create(
            store_dir, StoreInfo(fps=policy_rate, image_size=(image_size, image_size)), exist_ok=True
        )
        self.bag_dir = Path(bag_dir) if bag_dir else Path(store_dir) / "mcap"
        self._report_leftovers(store)

        # One thread owns the robot: a sim renders through an EGL context bound to the thread that
        # created it, and executor threads change from goal to goal.
        self._robot_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="robot")
        self._robot_thread.submit(self.robot.connect).result()
        self.keyboard = self.teleop = None
        if source == "keyboard":
            self.keyboard = self.teleop = KeyboardTeleop(driver=CartesianDriver(self.robot.arm))
        elif source == "spacemouse":
            self.teleop = TwistTeleop(self.robot.dt, driver=CartesianDriver(self.robot.arm))
        else:
            self.teleop = LeaderArmTeleop(self.robot.arm)
        self.session = DemoSession(self.robot, self.teleop, store, self.bag_dir, config)
        self._pending: dict[str, tuple[DemoTarget, int]] = {}  # request id -> (target, accepted so far)
        self._lock = threading.Lock()
        self._busy = False

        inputs = ReentrantCallbackGroup()
        self._episode_pub = self.create_publisher(DemoEpisode, TOPIC_DEMO_EPISODES, OPERATOR_QOS)
        self._pending_pub = self.create_publisher(String, TOPIC_PENDING_REQUESTS, LATCHED_QOS)
        self.create_subscription(
            DemoRequest, TOPIC_DEMO_REQUESTS, self._on_request, OPERATOR_QOS, callback_group=inputs
        )
        self.create_subscription(
            String, TOPIC_TELEOP_KEYS, self._on_key_msg, INPUT_QOS, callback_group=inputs
        )
        self.create_subscription(
            String, TOPIC_DEMO_COMMAND, self._on_command, INPUT_QOS, callback_group=inputs
        )
        if source == "spacemouse":
            self.create_subscription(
                Twist, TOPIC_TELEOP_TWIST, self._on_twist, INPUT_QOS, callback_group=inputs
            )
        if source == "leader_arm":
            self.create_subscription(
                JointState, TOPIC_TELEOP_LEADER, self._on_leader, INPUT_QOS, callback_group=inputs
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
        if stdin_keys and sys.stdin.isatty():
            threading.Thread(target=self._read_terminal, daemon=True).start()
        self.get_logger().info(
            f"demo station: {self.robot!r}, source {source}, store {store_dir}, bags {self.bag_dir}; "
            f"keys: {KEY_HELP}"
        )

    def _report_leftovers(self, store: EpisodeStore) -> None:
        for take in incomplete_takes(store.root):
            self.get_logger().warning(
                f"incomplete take of request {take.get('request_id', '?')} from a recorder that was stopped "
                f"mid-take: not stored, not used ({take['marker']}; EpisodeStore.recover removes it)"
            )
        for episode_id in export_missing_bags(store, self.bag_dir):
            self.get_logger().info(f"re-exported the missing MCAP bag of accepted {episode_id}")

    # ------------------------------------------------------------------ requests
    def _on_request(self, msg: DemoRequest) -> None:
        try:
            target = resolve_request(request_from_msg(msg), self.robot.arm.name)
        except (RequestRejectedError, ValueError) as error:
            self._reject(msg, getattr(error, "reason", str(error)))
            return
        with self._lock:
            accepted = self._pending.get(target.request.request_id, (target, 0))[1]
            self._pending[target.request.request_id] = (target, accepted)
        self.get_logger().info(f"demo request: {describe(target, accepted)}")
        self._publish_pending()

    def _reject(self, msg: DemoRequest, reason: str) -> DemoEpisode:
        """Answer a request that cannot be served, so the coach never waits for it."""
        with self._lock:
            self._pending.pop(msg.request_id, None)
        self.get_logger().warning(f"demo request {msg.request_id!r} rejected: {reason}")
        answer = DemoEpisode(
            request_id=msg.request_id,
            robot=msg.robot,
            subtask=msg.subtask,
            accepted=False,
            rejection_reason=reason,
        )
        answer.header.stamp = self.get_clock().now().to_msg()
        self._episode_pub.publish(answer)
        self._publish_pending()
        return answer

    def _publish_pending(self) -> None:
        with self._lock:
            lines = [describe(target, accepted) for target, accepted in self._pending.values()]
        text = "\n".join(lines) if lines else "no pending demo requests"
        self._pending_pub.publish(String(data=text))

    # ------------------------------------------------------------------ operator input
    def _on_key_msg(self, msg: String) -> None:
        self._on_key(msg.data)

    def _on_key(self, key: str) -> None:
        command = key_command(key)
        if command is not None:
            self.session.command(command)
        elif self.keyboard is not None:
            self.keyboard.press(key)

    def _on_command(self, msg: String) -> None:
        if msg.data not in COMMANDS:
            self.get_logger().warning(f"unknown operator command {msg.data!r}; known: {', '.join(COMMANDS)}")
            return
        self.session.command(msg.data)

    def _on_twist(self, msg: Twist) -> None:
        self.teleop.set_twist(np.array([msg.linear.x, msg.linear.y, msg.linear.z]), msg.angular.z)

    def _on_leader(self, msg: JointState) -> None:
        try:
            self.teleop.set_positions(joint_state_to_command(msg, self.robot.arm.joint_names))
        except ValueError as error:
            self.get_logger().warning(f"leader arm state ignored: {error}")

    def _read_terminal(self) -> None:
        """Keys from the node's terminal in cbreak mode (no Enter needed); the terminal is restored after."""
        fd = sys.stdin.fileno()
        saved = termios.tcgetattr(fd)
        try:
            tty.setcbreak(fd)
            while key := sys.stdin.read(1):
                self._on_key(key)
        finally:
            termios.tcsetattr(fd, termios.TCSADRAIN, saved)

    # ------------------------------------------------------------------ CollectDemo
    def _on_goal(self, goal: CollectDemo.Goal) -> GoalResponse:
        if self._busy:
            self.get_logger().warning("CollectDemo goal rejected: a collection is already running")
            return GoalResponse.REJECT
        return GoalResponse.ACCEPT

    def _execute(self, goal_handle) -> CollectDemo.Result:
        self._busy = True
        try:
            return self._collect(goal_handle)
        finally:
            self._busy = False

    def _collect(self, goal_handle) -> CollectDemo.Result:
        msg = goal_handle.request.request
        result = CollectDemo.Result()
        try:
            target = resolve_request(request_from_msg(msg), self.robot.arm.name)
        except (RequestRejectedError, ValueError) as error:
            result.message = self._reject(msg, getattr(error, "reason", str(error))).rejection_reason
            goal_handle.abort()
            return result
        with self._lock:
            self._pending.setdefault(target.request.request_id, (target, 0))
        self._publish_pending()
        self.get_logger().info(f"collecting: {describe(target)}")

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
                with self._lock:
                    target_, accepted = self._pending.get(msg.request_id, (target, 0))
                    self._pending[msg.request_id] = (target_, accepted + 1)
                self._publish_pending()
            verdict = (
                f"accepted as {take.episode_id} ({take.bag})" if take.accepted else take.rejection_reason
            )
            self.get_logger().info(f"[{msg.request_id}] take of {len(take.episode)} frames: {verdict}")

        def canceled() -> bool:
            return goal_handle.is_cancel_requested

        try:
            takes = self._robot_thread.submit(
                self.session.collect, target, on_status, canceled, on_take
            ).result()
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
        accepted = sum(t.accepted for t in takes)
        result.success = accepted >= msg.count
        result.message = f"{accepted}/{msg.count} demos accepted in {len(takes)} takes"
        if result.success:
            with self._lock:
                self._pending.pop(msg.request_id, None)
            self._publish_pending()
        self.get_logger().info(f"[{msg.request_id}] {result.message}")
        goal_handle.succeed()
        return result

    def _answer(self, request: DemoRequest, take: TakeResult) -> DemoEpisode:
        answer = DemoEpisode(
            episode_id=take.episode_id,
            request_id=request.request_id,
            robot=request.robot,
            subtask=subtask_to_msg(take.episode.composition.subtasks[0]),
            initial_state_seed=take.seed,
            num_frames=len(take.episode),
            duration=take.duration,
            storage_uri=take.storage_uri,
            accepted=take.accepted,
            rejection_reason=take.rejection_reason,
            preview=[image_to_msg(image) for image in take.preview],
        )
        answer.header.stamp = self.get_clock().now().to_msg()
        return answer

    def destroy_node(self) -> None:
        if self.robot.is_connected:
            self._robot_thread.submit(self.robot.disconnect).result()
        self._robot_thread.shutdown()
        super().destroy_node()


def main(args: list[str] | None = None) -> None:
    spin_node(DemoRecorder, args, threads=4)


if __name__ == "__main__":
    main()

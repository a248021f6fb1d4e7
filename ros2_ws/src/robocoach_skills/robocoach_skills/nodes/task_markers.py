"""`task_markers` node: the executor's current subtask and its progress as rviz markers.

Listens to the `ExecuteTask` action's feedback topic (every goal's feedback, whoever sent the goal)
and to the coach's round summaries, and publishes a `visualization_msgs/MarkerArray` in the `world`
frame: a text line naming the subtask, a progress bar (grey track, a fill that is orange while
running and green once the subtask completed), and the latest round summary.
"""

from __future__ import annotations

from rclpy.node import Node
from rclpy.qos import QoSDurabilityPolicy, QoSProfile, QoSReliabilityPolicy
from visualization_msgs.msg import Marker, MarkerArray

from robocoach_msgs.action import ExecuteTask
from robocoach_msgs.msg import CoachRound
from robocoach_skills.constants import (
    ACTION_EXECUTE_TASK,
    FRAME_WORLD,
    TOPIC_COACH_ROUNDS,
    TOPIC_TASK_MARKERS,
)
from robocoach_skills.nodes.spin import spin_node

NAMESPACE = "robocoach_task"
BAR_LENGTH = 0.4  # progress bar at 100% [m]
BAR_HEIGHT = 0.03  # [m]
BAR_ORIGIN = (0.0, -0.2, 0.6)  # left end of the bar in the world frame [m], above the table
TEXT_HEIGHT = 0.04  # [m]
TRACK_RGBA = (0.5, 0.5, 0.5, 0.4)
RUNNING_RGBA = (1.0, 0.6, 0.0, 0.9)
DONE_RGBA = (0.1, 0.8, 0.2, 0.9)
TEXT_RGBA = (1.0, 1.0, 1.0, 1.0)
TEXT_ID, TRACK_ID, FILL_ID, ROUND_ID = range(4)
# rclpy has no public constant for an action's feedback topic; this suffix is part of the ROS 2 design.
FEEDBACK_SUFFIX = "/_action/feedback"


def _marker(marker_id: int, kind: int, rgba: tuple[float, ...], frame_id: str) -> Marker:
    marker = Marker(ns=NAMESPACE, id=marker_id, type=kind, action=Marker.ADD)
    marker.header.frame_id = frame_id
    marker.pose.orientation.w = 1.0
    marker.color.r, marker.color.g, marker.color.b, marker.color.a = rgba
    return marker


def subtask_markers(
    index: int, skill: str, progress: float, completed: bool, elapsed: float, frame_id: str = FRAME_WORLD
) -> MarkerArray:
    """Markers for subtask `index` (`skill`) at `progress` 0..1 (clamped).

    >>> markers = subtask_markers(1, "pick", 0.5, False, 2.0).markers
    >>> markers[0].text, round(markers[2].scale.x, 3)
    ('subtask 2: pick  50%  (2.0 s)', 0.2)
    """
    fraction = min(max(float(progress), 0.0), 1.0)
    x, y, z = BAR_ORIGIN
    text = _marker(TEXT_ID, Marker.TEXT_VIEW_FACING, TEXT_RGBA, frame_id)
    text.text = f"subtask {index + 1}: {skill}  {fraction:.0%}  ({elapsed:.1f} s)" + (
        "  done" if completed else ""
    )
    text.scale.z = TEXT_HEIGHT
    text.pose.position.x, text.pose.position.y, text.pose.position.z = (
        x,
        y + BAR_LENGTH / 2,
        z + 2 * BAR_HEIGHT,
    )
    track = _marker(TRACK_ID, Marker.CUBE, TRACK_RGBA, frame_id)
    track.scale.x, track.scale.y, track.scale.z = BAR_LENGTH, BAR_HEIGHT, BAR_HEIGHT
    track.pose.position.x, track.pose.position.y, track.pose.position.z = x + BAR_LENGTH / 2, y, z
    fill = _marker(FILL_ID, Marker.CUBE, DONE_RGBA if completed else RUNNING_RGBA, frame_id)
    # A zero-size cube is invalid in rviz; an empty bar is a sliver.
    fill.scale.x, fill.scale.y, fill.scale.z = (
        max(fraction * BAR_LENGTH, 1e-3),
        BAR_HEIGHT * 1.1,
        BAR_HEIGHT * 1.1,
    )
    fill.pose.position.x, fill.pose.position.y, fill.pose.position.z = x + fill.scale.x / 2, y, z
    return MarkerArray(markers=[text, track, fill])


def round_marker(summary: CoachRound, frame_id: str = FRAME_WORLD) -> Marker:
    """A text marker with the coach's round summary: where it failed, what it asked for."""
    failures = ", ".join(
        f"{s} {m:.0%}" for s, m in zip(summary.failure_skills, summary.failure_mass, strict=False)
    )
    asked = ", ".join(
        f"{s} x{c}" for s, c in zip(summary.allocation_skills, summary.allocation_counts, strict=False)
    )
    marker = _marker(ROUND_ID, Marker.TEXT_VIEW_FACING, TEXT_RGBA, frame_id)
    marker.text = (
        f"round {summary.round} ({summary.robot}): first failures {failures or '-'}; "
        f"demos asked {asked or '-'}; budget {summary.demos_spent}/{summary.demo_budget}"
    )
    marker.scale.z = TEXT_HEIGHT * 0.8
    x, y, z = BAR_ORIGIN
    marker.pose.position.x, marker.pose.position.y, marker.pose.position.z = (
        x,
        y + BAR_LENGTH / 2,
        z + 5 * BAR_HEIGHT,
    )
    return marker


class TaskMarkers(Node):
    def __init__(self) -> None:
        super().__init__("task_markers")
        self.frame_id = self.declare_parameter("frame_id", FRAME_WORLD).value  # frame of the markers
        action = self.declare_parameter("execute_task_action", ACTION_EXECUTE_TASK).value  # action to watch
        # Markers are state, not a stream: late rviz instances get the last ones.
        latched = QoSProfile(
            depth=1, reliability=QoSReliabilityPolicy.RELIABLE, durability=QoSDurabilityPolicy.TRANSIENT_LOCAL
        )
        self._pub = self.create_publisher(MarkerArray, TOPIC_TASK_MARKERS, latched)
        # Action feedback is published reliable/volatile by rclpy's action server.
        self.create_subscription(
            ExecuteTask.Impl.FeedbackMessage, action + FEEDBACK_SUFFIX, self._on_feedback, 10
        )
        # Volatile: matches the coach's publisher whether or not it is transient local.
        self.create_subscription(CoachRound, TOPIC_COACH_ROUNDS, self._on_round, 10)
        self._task: list[Marker] = []  # the last subtask markers and round summary, republished together
        self._round: list[Marker] = []  # so the latched array always holds both
        self.get_logger().info(
            f"markers of {action} feedback on {TOPIC_TASK_MARKERS} in frame {self.frame_id!r}"
        )

    def _on_feedback(self, msg) -> None:
        fb = msg.feedback
        p = fb.progress
        markers = subtask_markers(
            fb.current_index, fb.current_skill, p.progress, p.completed, p.elapsed, self.frame_id
        )
        self._task = list(markers.markers)
        self._publish()

    def _on_round(self, msg: CoachRound) -> None:
        self._round = [round_marker(msg, self.frame_id)]
        self._publish()

    def _publish(self) -> None:
        self._pub.publish(MarkerArray(markers=self._task + self._round))


def main(args: list[str] | None = None) -> None:
    spin_node(TaskMarkers, args)


if __name__ == "__main__":
    main()

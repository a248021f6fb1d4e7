"""`interface_echo` node: answers every robocoach_msgs interface, to prove two processes agree on them.

Run it on one machine and `robocoach check-interfaces` (or the round-trip tests) on another: each
message published on `/robocoach/echo/<name>` comes back on `/robocoach/echo/<name>/reply`; each
service and action at `/robocoach/echo/<name>` answers with a sample reply whose first string field
holds the JSON digest of what arrived. Actions publish feedback and honour cancel while they hold.
"""

from __future__ import annotations

import time
from functools import partial

from rclpy.action import ActionServer, CancelResponse
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.node import Node
from rclpy.qos import QoSDurabilityPolicy, QoSProfile, QoSReliabilityPolicy

from robocoach_bringup.interface_check import (
    action_types,
    echo_name,
    echo_reply,
    message_types,
    service_types,
)
from robocoach_skills.nodes.spin import spin_node

ECHO_QOS = QoSProfile(
    depth=10, reliability=QoSReliabilityPolicy.RELIABLE, durability=QoSDurabilityPolicy.VOLATILE
)


class InterfaceEcho(Node):
    def __init__(self) -> None:
        super().__init__("interface_echo")
        self.declare_parameter(
            "action_hold_s", 0.3
        )  # s an action goal runs (publishing feedback) before it succeeds
        self.declare_parameter("feedback_period_s", 0.05)  # s between feedback messages while holding
        group = ReentrantCallbackGroup()
        for name, cls in message_types().items():
            publisher = self.create_publisher(cls, echo_name(name) + "/reply", ECHO_QOS)
            self.create_subscription(cls, echo_name(name), publisher.publish, ECHO_QOS, callback_group=group)
        for name, cls in service_types().items():
            self.create_service(
                cls, echo_name(name), partial(self._serve, cls), qos_profile=ECHO_QOS, callback_group=group
            )
        self._action_servers = [
            ActionServer(
                self,
                cls,
                echo_name(name),
                execute_callback=partial(self._execute, cls),
                cancel_callback=lambda _goal: CancelResponse.ACCEPT,
                callback_group=group,
            )
            for name, cls in action_types().items()
        ]
        self.get_logger().info(
            f"echoing {len(message_types())} messages, {len(service_types())} services, "
            f"{len(action_types())} actions under /robocoach/echo/"
        )

    def _serve(self, cls, request, _response):
        return echo_reply(cls.Response, request)

    def _execute(self, cls, goal_handle):
        hold_s = self.get_parameter("action_hold_s").value
        period_s = self.get_parameter("feedback_period_s").value
        feedback = echo_reply(cls.Feedback, goal_handle.request)
        deadline = time.monotonic() + hold_s
        while True:
            if goal_handle.is_cancel_requested:
                goal_handle.canceled()
                return cls.Result()
            goal_handle.publish_feedback(feedback)
            if time.monotonic() >= deadline:
                break
            time.sleep(period_s)
        goal_handle.succeed()
        return echo_reply(cls.Result, goal_handle.request)


def main(args: list[str] | None = None) -> None:
    spin_node(InterfaceEcho, args, threads=4)


if __name__ == "__main__":
    main()

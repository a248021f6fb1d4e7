"""`robot_driver` node: any robot backend on the ROS graph, through the robot interface only.

Serves what the skill executor and the demo recorder listen to: `sensor_msgs/JointState` on
TOPIC_JOINT_STATES (arm joints + "gripper"), the camera `sensor_msgs/Image` on TOPIC_CAMERA when the
backend observes images (the sim; a real arm's camera has its own driver publishing TOPIC_CAMERA),
and it follows `sensor_msgs/JointState` commands on TOPIC_JOINT_COMMAND.

A command goes through `Robot.send_action` as soon as it arrives, so the interface clips it (position
and velocity limits) and refuses malformed ones (wrong length, NaN). Waiting for the next control tick
instead would delay it by up to a policy period, and a second command within that period would
replace it unseen. When no newer command has come for a policy period, the latest one is sent again:
a clipped command goes on toward its target, one period's velocity limit at a time. A refused command is
logged with its reason and the arm holds. Commands older than `command_timeout_s` are dropped and the
arm holds: a crashed executor must not leave the arm chasing a stale target. A command without the
gripper channel keeps the last gripper command. With `command_check: refuse` a command that would
need clipping is refused instead (for bringing up a policy: it shows whether the policy relies on
clipping).

`~/hold` and `~/estop` take `std_msgs/Empty` (std_srvs is not installable here, so they are topics,
reliable so none is dropped): hold stops where the arm is; e-stop latches a fault, after which every
command is refused until the driver restarts. Faults are logged and published as JSON (the fields of
a `diagnostic_msgs/DiagnosticStatus`: level, name, message, hardware_id) on the latched `~/status`.

Backend options are the fields of the backend's config dataclass as a JSON object, e.g.
`backend_options:='{"transport": "libfranka", "robot_ip": "172.16.0.2"}'`; `policy_hz` comes from
`policy_rate_hz`.
"""

from __future__ import annotations

import json
import time
from enum import Enum
from typing import Any

import numpy as np
from rclpy.node import Node
from rclpy.qos import (
    QoSDurabilityPolicy,
    QoSHistoryPolicy,
    QoSProfile,
    QoSReliabilityPolicy,
    qos_profile_sensor_data,
)
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Empty, String

from robocoach_skills.constants import (
    FRAME_CAMERA,
    GRIPPER_JOINT,
    OBS_IMAGE,
    OBS_PROPRIO,
    TOPIC_CAMERA,
    TOPIC_JOINT_COMMAND,
    TOPIC_JOINT_STATES,
)
from robocoach_skills.nodes.conversions import image_to_msg, joint_state_to_command
from robocoach_skills.nodes.spin import spin_node
from robocoach_skills.robots import RobotError, RobotFaultError, make_robot
from robocoach_skills.sim.arms import check_joint_command

# Commands must not be dropped or reordered: reliable, keep the last few.
COMMAND_QOS = QoSProfile(
    depth=5, reliability=QoSReliabilityPolicy.RELIABLE, history=QoSHistoryPolicy.KEEP_LAST
)
# The status is latched: a late subscriber (rviz, a test) still learns the current fault.
STATUS_QOS = QoSProfile(
    depth=1,
    reliability=QoSReliabilityPolicy.RELIABLE,
    history=QoSHistoryPolicy.KEEP_LAST,
    durability=QoSDurabilityPolicy.TRANSIENT_LOCAL,
)
STATUS_OK, STATUS_ERROR = "OK", "ERROR"  # diagnostic_msgs/DiagnosticStatus level names


class CommandCheck(str, Enum):  # noqa: UP042 (StrEnum is Python 3.11+; Humble runs 3.10)
    """What happens to a command outside the position or velocity limits."""

    CLIP = "clip"  # the interface clips it (the arm goes as far as is safe)
    REFUSE = "refuse"  # refused with the reason, the arm holds


def parse_backend_options(text: str) -> dict[str, Any]:
    """The `backend_options` parameter: a JSON object of backend config fields.

    >>> parse_backend_options('{"channel": "can0", "speed_percent": 30}')
    {'channel': 'can0', 'speed_percent': 30}
    >>> parse_backend_options("")
    {}
    """
    try:
        options = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as error:
        raise ValueError(f"backend_options {text!r} is not JSON: {error}") from error
    if not isinstance(options, dict):
        raise ValueError(f"backend_options {text!r} must be a JSON object of backend config fields")
    return options


class RobotDriver(Node):
    """Wires one connected `Robot` to the robot topics; subclasses add what only their backend has."""

    default_command_check = CommandCheck.CLIP  # the `command_check` parameter's default

    def __init__(self, node_name: str = "robot_driver", backend: str | None = None) -> None:
        super().__init__(node_name)
        declare = self.declare_parameter
        # Registry name (robots.robot_backends()); a specialisation that fixes it does not declare it.
        self.backend = backend if backend is not None else declare("backend", "sim").value
        expected_arm = declare("robot", "").value  # franka | piper: start fails unless the backend drives it
        options = parse_backend_options(declare("backend_options", "").value)  # JSON object, see above
        policy_rate = declare(
            "policy_rate_hz", 10.0
        ).value  # command rate; the velocity limit spans 1/rate [Hz]
        joint_state_rate = declare("joint_state_rate_hz", 50.0).value  # [Hz]
        camera_rate = declare("camera_rate_hz", 10.0).value  # only used when the backend has a camera [Hz]
        self.command_timeout_s = declare("command_timeout_s", 1.0).value  # hold when commands stop [s]
        self.command_check = CommandCheck(declare("command_check", self.default_command_check.value).value)
        if not self.command_timeout_s > 0:
            raise ValueError(f"command_timeout_s must be positive, got {self.command_timeout_s}")

        self.robot = make_robot(self.backend, **{"policy_hz": policy_rate, **self.backend_options(options)})
        self.arm = self.robot.arm
        if expected_arm and self.arm.name != expected_arm:
            raise ValueError(
                f"backend {self.backend!r} drives a {self.arm.name} arm, but robot is {expected_arm!r}"
            )
        self.joint_names = (*self.arm.joint_names, GRIPPER_JOINT)
        self._command: np.ndarray | None = None  # latest command (joints + gripper); None = holding
        self._command_time = 0.0  # monotonic arrival time of `_command` [s]
        self._sent_time = 0.0  # monotonic time `_command` last went to the robot [s]
        self.refused = 0
        self._status: tuple[str, str] | None = None  # last published (level, message)

        self.robot.connect()
        self._gripper_command = float(self.robot.observe()[OBS_PROPRIO][-1])  # until a command sets it

        self._joint_pub = self.create_publisher(JointState, TOPIC_JOINT_STATES, qos_profile_sensor_data)
        self._status_pub = self.create_publisher(String, "~/status", STATUS_QOS)
        self.create_subscription(JointState, TOPIC_JOINT_COMMAND, self._on_command, COMMAND_QOS)
        self.create_subscription(Empty, "~/hold", self._on_hold, COMMAND_QOS)
        self.create_subscription(Empty, "~/estop", self._on_estop, COMMAND_QOS)
        self.create_timer(1.0 / policy_rate, self._control_tick)
        self.create_timer(1.0 / joint_state_rate, self._publish_joint_state)
        has_camera = OBS_IMAGE in self.robot.observation_features
        if has_camera:
            self._camera_pub = self.create_publisher(Image, TOPIC_CAMERA, qos_profile_sensor_data)
            self.create_timer(1.0 / camera_rate, self._publish_camera)
        self._report_health()
        checked = "clipped" if self.command_check is CommandCheck.CLIP else "refused"
        self.get_logger().info(
            f"{self.robot!r} connected: policy {policy_rate} Hz, joint states {joint_state_rate} Hz, "
            + (f"camera {camera_rate} Hz" if has_camera else "no camera (its own driver publishes it)")
            + f", commands {checked} at the limits, hold after {self.command_timeout_s} s"
        )

    # ------------------------------------------------------------------ specialisation hooks
    def backend_options(self, options: dict[str, Any]) -> dict[str, Any]:
        """The backend config fields to build the robot with (a specialisation adds its own)."""
        return options

    def measured_proprio(self) -> np.ndarray:
        """Joint positions [rad] + gripper opening [0..1] for the joint-state topic."""
        return self.robot.observe()[OBS_PROPRIO]

    # ------------------------------------------------------------------ commands
    def _on_command(self, msg: JointState) -> None:
        try:
            command = joint_state_to_command(msg, self.arm.joint_names)
        except ValueError as error:
            return self._refuse(str(error))
        if len(command) == self.arm.n_joints:  # no gripper channel: keep the gripper as commanded before
            command = np.append(command, self._gripper_command)
        if self.command_check is CommandCheck.REFUSE:
            try:
                measured = self.measured_proprio()[: self.arm.n_joints]
            except RobotError as error:
                return self._refuse(str(error))
            reason = check_joint_command(self.arm, command, measured, self.robot.dt)
            if reason is not None:
                return self._refuse(reason)
        self._command, self._command_time = command, time.monotonic()
        self._follow()

    def _control_tick(self) -> None:
        self._report_health()
        now = time.monotonic()
        if self._command is not None and now - self._command_time > self.command_timeout_s:
            self.get_logger().warning(f"no joint command for {self.command_timeout_s} s; holding position")
            self._hold()
        if self._command is not None and now - self._sent_time >= self.robot.dt:
            self._follow()

    def _follow(self) -> None:
        """Send the latest command to the robot (refused: hold)."""
        try:
            applied = self.robot.send_action(self._command)
        except (ValueError, RobotError) as error:
            self._refuse(str(error))
            return
        self._gripper_command, self._sent_time = float(applied[-1]), time.monotonic()

    def _refuse(self, reason: str) -> None:
        self.refused += 1
        self.get_logger().warning(
            f"joint command refused ({reason}); holding position [{self.refused} refused]"
        )
        self._hold()

    def _hold(self) -> None:
        self._command = None
        try:
            self.robot.hold()
        except RobotError as error:  # a faulted backend may have no pose to hold; it stopped commanding
            self.get_logger().error(f"hold failed: {error}")

    def _on_hold(self, _: Empty) -> None:
        self.get_logger().info("hold requested")
        self._hold()

    def _on_estop(self, _: Empty) -> None:
        self._command = None
        self.robot.estop()
        self._report_health()

    # ------------------------------------------------------------------ measurements and health
    def _publish_joint_state(self) -> None:
        try:
            proprio = self.measured_proprio()
        except RobotFaultError:  # stale measurements are not published; the status says why
            return
        msg = JointState(name=list(self.joint_names), position=[float(v) for v in proprio])
        msg.header.stamp = self.get_clock().now().to_msg()
        self._joint_pub.publish(msg)

    def _publish_camera(self) -> None:
        try:
            image = self.robot.observe()[OBS_IMAGE]
        except RobotFaultError:
            return
        self._camera_pub.publish(image_to_msg(image, self.get_clock().now().to_msg(), FRAME_CAMERA))

    def _report_health(self) -> None:
        """Publish and log the robot's health when it changes (polled, so idle faults show too)."""
        try:
            health = self.robot.health()
        except RobotError as error:
            level, message = STATUS_ERROR, str(error)
        else:
            level, message = (STATUS_OK, "ok") if health.ok else (STATUS_ERROR, health.reason)
        if (level, message) == self._status:
            return
        self._status = (level, message)
        if level == STATUS_OK:
            self.get_logger().info(f"robot healthy: {self.robot!r}")
        else:
            self.get_logger().error(f"robot fault: {message}; commands are refused")
        status = {"level": level, "name": self.get_fully_qualified_name(), "message": message}
        status["hardware_id"] = f"{self.backend}:{self.arm.name}"
        self._status_pub.publish(String(data=json.dumps(status)))

    def destroy_node(self) -> None:
        """Hold and release the robot before the node goes away (Ctrl-C, shutdown)."""
        if self.robot.is_connected:
            self.robot.disconnect()
            self.get_logger().info(f"{self.robot!r} disconnected")
        super().destroy_node()


def main(args: list[str] | None = None) -> None:
    spin_node(RobotDriver, args)


if __name__ == "__main__":
    main()

"""`RosRobot`: the robot interface over the `robot_driver`'s topics, for nodes that share its arm.

On hardware the `robot_driver` holds the only connection to the arm: libfranka accepts a single
control connection, and only one program can command the PiPER on its CAN bus. The skill executor
and the demo recorder therefore never open their own. They use this class, which reads
TOPIC_JOINT_STATES (and TOPIC_CAMERA when a camera is asked for) and publishes TOPIC_JOINT_COMMAND on
their node. Because it is a `robots.Robot`, a command is clipped here the same way a backend clips
it, and the driver clips it again against its own, newer measurement. If joint states (or camera
frames) stop for `feedback_timeout_s`, that is a fault, and it latches as on every backend until a
reconnect. `connect` waits until the driver is heard and listens for commands, or fails naming the
topic.

The router drives it as its RobotEnv (`reset`/`step`): each step publishes one command, waits for the
next policy tick and returns measurements received after the command went out. A step that comes
after its tick (slow inference, a loaded machine) restarts the schedule from then: making up for
the lost time with a burst of commands would send targets the arm has no time to follow.
"""

from __future__ import annotations

import threading
import time

import numpy as np
from rclpy.callback_groups import CallbackGroup
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import Image, JointState

from robocoach_skills.composition import Composition
from robocoach_skills.constants import (
    GRIPPER_JOINT,
    OBS_IMAGE,
    OBS_PROPRIO,
    TOPIC_CAMERA,
    TOPIC_JOINT_COMMAND,
    TOPIC_JOINT_STATES,
)
from robocoach_skills.nodes.conversions import command_to_joint_state, joint_state_to_command, msg_to_image
from robocoach_skills.nodes.robot_driver import COMMAND_QOS
from robocoach_skills.robots.base import HEALTHY, Robot, RobotError, RobotHealth
from robocoach_skills.sim.arms import ArmSpec

OBS_WAIT_S = 5.0  # how long `reset`/`step` wait for fresh sensor data before TimeoutError [s]
SPIN_PERIOD_S = 0.05  # connect's polling period [s]


class RosRobot(Robot):
    """One arm served by a `robot_driver` on the ROS graph, seen through `node`'s subscriptions."""

    name = "ros"  # not a registered backend: it needs a node, which make_robot cannot supply

    def __init__(
        self,
        node: Node,
        arm: ArmSpec,
        dt: float,
        camera_size: int | None = None,
        feedback_timeout_s: float = 0.5,
        connect_timeout_s: float = OBS_WAIT_S,
        callback_group: CallbackGroup | None = None,
    ) -> None:
        """`camera_size`: subscribe to TOPIC_CAMERA and observe its frames, which must be that square
        size. Frames of any other size are dropped."""
        super().__init__(arm, dt, camera_size)
        if not (feedback_timeout_s > 0 and connect_timeout_s > 0):
            raise ValueError(f"timeouts must be positive, got {feedback_timeout_s} and {connect_timeout_s} s")
        self.node = node
        self.feedback_timeout_s, self.connect_timeout_s = feedback_timeout_s, connect_timeout_s
        self.last_command_time = 0.0  # monotonic time of the last published command (a watchdog's) [s]
        self.late_ticks = 0  # policy ticks whose command went out after the tick's period had ended
        self._connected = False
        self._next_tick = 0.0  # monotonic time of the router's current policy tick [s]
        self._sensor = threading.Condition()
        self._joints: np.ndarray | None = None  # measured joints [rad] + gripper opening, float32
        self._image: np.ndarray | None = None
        self._joint_time = self._image_time = -np.inf  # monotonic arrival times [s]
        self._ignored = ""  # why the last unusable joint state was dropped, for connect's error
        self._command_pub = node.create_publisher(JointState, TOPIC_JOINT_COMMAND, COMMAND_QOS)
        sensors = {"qos_profile": qos_profile_sensor_data, "callback_group": callback_group}
        node.create_subscription(JointState, TOPIC_JOINT_STATES, self._on_joints, **sensors)
        if camera_size is not None:
            node.create_subscription(Image, TOPIC_CAMERA, self._on_image, **sensors)

    def _describe(self) -> str:
        return f"the robot_driver's {self.arm.name} on {TOPIC_JOINT_STATES}"

    # ------------------------------------------------------------------ sensors
    def _on_joints(self, msg: JointState) -> None:
        try:
            proprio = joint_state_to_command(msg, self.arm.joint_names)
            n = self.arm.n_joints
            if proprio.size != n + 1:
                raise ValueError(
                    f"{proprio.size} positions; a {self.arm.name} has {n} joints + {GRIPPER_JOINT}"
                )
        except ValueError as error:
            self._ignored = f"joint state ignored: {error}"
            self.node.get_logger().warning(self._ignored, throttle_duration_sec=5.0)
            return
        with self._sensor:
            self._joints, self._joint_time = proprio.astype(np.float32), time.monotonic()
            self._sensor.notify_all()

    def _on_image(self, msg: Image) -> None:
        try:
            image = msg_to_image(msg)
            if image.shape[:2] != (self._camera_size, self._camera_size):
                raise ValueError(f"frame is {msg.width}x{msg.height}, expected {self._camera_size} square")
        except ValueError as error:
            self.node.get_logger().warning(f"camera frame ignored: {error}", throttle_duration_sec=5.0)
            return
        with self._sensor:
            self._image, self._image_time = image, time.monotonic()
            self._sensor.notify_all()

    def _stale(self) -> str:
        """Why the measurements cannot be trusted now ("" when they can)."""
        now = time.monotonic()
        feeds = [(TOPIC_JOINT_STATES, "joint state", self._joint_time)]
        if self._camera_size is not None:
            feeds.append((TOPIC_CAMERA, "camera frame", self._image_time))
        for topic, what, received in feeds:
            age = now - received
            if not np.isfinite(age):
                return f"no {what} on {topic}"
            if age > self.feedback_timeout_s:
                return f"no {what} on {topic} for {age:.2f} s (feedback_timeout_s {self.feedback_timeout_s})"
        return ""

    def _health(self) -> RobotHealth:
        reason = self._stale()
        return RobotHealth.fault(f"lost the robot_driver: {reason}") if reason else HEALTHY

    # ------------------------------------------------------------------ connection
    @property
    def is_connected(self) -> bool:
        return self._connected

    def _connect(self) -> None:
        """Wait until the driver publishes fresh measurements and subscribes to commands (a command
        published before the driver's subscription is matched would be lost). A node that is not
        spinning yet, such as one connecting in its constructor, is spun here meanwhile."""
        spinner = None
        if self.node.executor is None:
            spinner = SingleThreadedExecutor(context=self.node.context)
            spinner.add_node(self.node)
        deadline = time.monotonic() + self.connect_timeout_s
        try:
            while missing := self._stale() or self._unmatched():
                if time.monotonic() > deadline:
                    hint = f" Last {self._ignored}" if self._ignored else ""
                    raise RobotError(
                        f"{missing} within {self.connect_timeout_s} s: is a robot_driver for the "
                        f"{self.arm.name} running on this ROS domain?{hint}"
                    )
                if spinner is not None:
                    spinner.spin_once(timeout_sec=SPIN_PERIOD_S)
                else:
                    time.sleep(SPIN_PERIOD_S)
        finally:
            if spinner is not None:
                self.node.executor = None  # detach, so the node's own executor can take it
                spinner.shutdown()
        self._connected = True

    def _unmatched(self) -> str:
        if self._command_pub.get_subscription_count() == 0:
            return f"no subscriber of {TOPIC_JOINT_COMMAND}"
        return ""

    def _disconnect(self) -> None:
        self._connected = False

    # ------------------------------------------------------------------ observing and commanding
    def _observe(self) -> dict[str, np.ndarray]:
        with self._sensor:
            obs = {OBS_PROPRIO: self._joints.copy()}
            if self._camera_size is not None:
                obs[OBS_IMAGE] = self._image
            return obs

    def _joint_positions(self) -> np.ndarray:
        with self._sensor:
            return self._joints[: self.arm.n_joints].astype(np.float64)

    def _publish(self, command: np.ndarray) -> None:
        stamp = self.node.get_clock().now().to_msg()
        self._command_pub.publish(command_to_joint_state(command, self.arm.joint_names, stamp))
        self.last_command_time = time.monotonic()

    def _apply_action(self, applied: np.ndarray) -> None:
        self._publish(applied)

    def _hold(self) -> None:
        """Command the measured joint positions (the gripper keeps its command), so the arm stops where it
        is. Stale measurements give no pose to hold, and a node that is shutting down cannot publish.
        In both cases nothing is sent, and the driver holds by itself once commands stop arriving."""
        if self._stale() or not self.node.context.ok():
            return
        self._publish(self._joint_positions())

    def _estop(self) -> None:
        """Hold. The latched fault then refuses further motion from here. The arm's own e-stop is the
        driver's `~/estop` topic."""
        self._hold()

    # ------------------------------------------------------------------ the router's RobotEnv
    def reset(self, composition: Composition, seed: int) -> dict[str, np.ndarray]:
        """Start pacing policy ticks from now. The scene is reset by the caller (ResetScene) or by hand."""
        self._next_tick = time.monotonic()
        return self.fresh_observation(after=self._next_tick)

    def step(self, action: np.ndarray) -> dict[str, np.ndarray]:
        """Command `action`, wait for the next policy tick and return the observation received after
        the command."""
        self.send_action(action)
        sent = self.last_command_time
        self._next_tick += self.dt
        if self._next_tick < sent:  # this tick came too late: hold the command a whole period from now
            self.late_ticks += 1
            self._next_tick = sent + self.dt
        time.sleep(max(0.0, self._next_tick - time.monotonic()))
        return self.fresh_observation(after=sent)

    def fresh_observation(self, after: float) -> dict[str, np.ndarray]:
        """The newest measurements, each received after `after` (monotonic time); TimeoutError after
        OBS_WAIT_S without them."""
        self._require_connected()
        camera = self._camera_size is not None
        with self._sensor:
            fresh = self._sensor.wait_for(
                lambda: self._joint_time >= after and (not camera or self._image_time >= after), OBS_WAIT_S
            )
            if not fresh:
                feeds = "camera frame and joint state" if camera else "joint state"
                raise TimeoutError(f"no fresh {feeds} within {OBS_WAIT_S} s")
            return self._observe()

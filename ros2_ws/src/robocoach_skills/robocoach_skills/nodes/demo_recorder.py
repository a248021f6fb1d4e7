"""`demo_recorder` node: an operator station recording teleoperated demos of the subtasks the coach asks for.

Requests, rejections, the pending list and the `CollectDemo` action are the station's
(`nodes.station`): the coach cannot tell this station from the scripted one. Takes are recorded
through the robot interface from the teleop source (`teleop.session`), and accepted ones are also
exported as MCAP bags.

The operator drives the arm from the keyboard (stdin in raw mode when the node has a terminal, or
the keys topic from anywhere), a leader arm or a spacemouse, and ends/accepts/discards takes with
keys or on the command topic (`end`, `accept`, `discard`, `open`, `close`, `toggle_gripper`).

The arm is reached in one of two ways (`backend`). `sim` runs the recorder's own in-process SimScene,
which is the standalone default. `driver` goes through the `robot_driver`'s topics (`nodes.ros_robot`),
which is how a real arm is reached: the driver holds the only connection to it (libfranka accepts a
single control connection, and the PiPER's CAN bus a single commander), and its backend and options
are configured on the driver. Through the driver, frames come from TOPIC_CAMERA (the camera driver's,
or the sim driver's). The operator sets each take's initial state up by hand, as announced on the
pending list, then says `ready` on the command topic (`reset: operator`); both are the defaults off
`sim`.
"""

from __future__ import annotations

import sys
import termios
import threading
import time
import tty
from pathlib import Path

import numpy as np
from geometry_msgs.msg import Twist
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.qos import QoSHistoryPolicy, QoSProfile, QoSReliabilityPolicy, qos_profile_sensor_data
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import String

from robocoach_skills.constants import (
    OBS_IMAGE,
    TOPIC_CAMERA,
    TOPIC_DEMO_COMMAND,
    TOPIC_TELEOP_KEYS,
    TOPIC_TELEOP_LEADER,
    TOPIC_TELEOP_TWIST,
)
from robocoach_skills.data.store import EpisodeStore, StoreInfo
from robocoach_skills.nodes.conversions import joint_state_to_command, msg_to_image
from robocoach_skills.nodes.ros_robot import RosRobot
from robocoach_skills.nodes.spin import spin_node
from robocoach_skills.nodes.station import LATCHED_QOS, OPERATOR_QOS, OperatorStation
from robocoach_skills.robots import Robot, make_robot
from robocoach_skills.sim.arms import get_arm
from robocoach_skills.teleop.session import (
    SESSION_COMMANDS,
    CameraError,
    DemoSession,
    SessionConfig,
    export_missing_bags,
    incomplete_takes,
)
from robocoach_skills.teleop.sources import (
    KEY_HELP,
    CartesianDriver,
    KeyboardTeleop,
    LeaderArmTeleop,
    TwistTeleop,
    key_command,
)

# The station QoS live in nodes.station; they stay importable from here for the recorder's clients.
__all__ = ["INPUT_QOS", "LATCHED_QOS", "OPERATOR_QOS", "DemoRecorder", "main"]

# Operator input: reliable (a lost "accept" loses a take) but volatile (old keys must never replay).
INPUT_QOS = QoSProfile(
    depth=50, reliability=QoSReliabilityPolicy.RELIABLE, history=QoSHistoryPolicy.KEEP_LAST
)
SOURCES = ("keyboard", "leader_arm", "spacemouse")
BACKENDS = ("sim", "driver")  # the recorder's own SimScene | the robot_driver's topics (any arm backend)
CAMERA_SOURCES = ("robot", "topic")  # the backend's own frames | the camera driver's TOPIC_CAMERA


class TopicCamera:
    """The newest frame heard on TOPIC_CAMERA; calling it raises CameraError once frames are stale."""

    def __init__(self, size: int, timeout_s: float):
        if not timeout_s > 0:
            raise ValueError(f"camera_timeout_s must be positive, got {timeout_s}")
        self.size, self.timeout_s = size, timeout_s  # frame edge [px], max frame age [s]
        self._frame: np.ndarray | None = None
        self._time = 0.0  # monotonic arrival time of _frame [s]
        self._lock = threading.Lock()

    def on_msg(self, msg: Image) -> None:
        """Keep `msg` as the newest frame; ValueError says why a frame is unusable (and it is dropped)."""
        image = msg_to_image(msg)
        if image.shape[:2] != (self.size, self.size):
            raise ValueError(f"frame is {msg.width}x{msg.height}; the store records {self.size}x{self.size}")
        with self._lock:
            self._frame, self._time = image, time.monotonic()

    def __call__(self) -> np.ndarray:
        with self._lock:
            frame, age = self._frame, time.monotonic() - self._time
        if frame is None:
            raise CameraError(f"no usable camera frame received on {TOPIC_CAMERA}")
        if age > self.timeout_s:
            raise CameraError(
                f"camera frames are stale: the newest on {TOPIC_CAMERA} is {age:.2f} s old "
                f"(camera_timeout_s {self.timeout_s})"
            )
        return frame


class DemoRecorder(OperatorStation):
    """A person's demo station: teleop inputs wired to a `DemoSession` served as an operator station."""

    def __init__(self) -> None:
        super().__init__("demo_recorder")
        declare = self.declare_parameter
        robot_name = declare("robot", "franka").value  # embodiment: franka or piper
        backend = declare("backend", "sim").value  # sim | driver, see BACKENDS
        driver_timeout_s = declare("driver_timeout_s", 10.0).value  # driver: wait for it at start [s]
        feedback_timeout_s = declare("feedback_timeout_s", 0.5).value  # driver: older states fault [s]
        image_size = declare("image_size", 64).value  # camera image edge, as stored [px]
        policy_rate = declare("policy_rate_hz", 10.0).value  # recording and command rate [Hz]
        store_dir = declare("store_dir", "").value  # episode store (created if missing)
        bag_dir = declare("bag_dir", "").value  # MCAP bags of accepted takes; "" = <store_dir>/mcap
        source = declare("source", "keyboard").value  # keyboard | leader_arm | spacemouse
        stdin_keys = declare("stdin_keys", True).value  # read keys from the terminal when there is one
        camera_source = declare("camera_source", "").value  # robot | topic; "" = robot when it has a camera
        camera_timeout_s = declare("camera_timeout_s", 0.5).value  # a take fails on older frames [s]
        config = SessionConfig(
            max_take_s=declare("max_take_s", 60.0).value,  # [s]
            verdict_timeout_s=declare("verdict_timeout_s", 300.0).value,  # [s]
            auto_accept=declare("auto_accept", False).value,  # sim: accept iff ground-truth success
            max_takes_per_demo=declare("max_takes_per_demo", 3).value,
            operator=declare("operator", "teleop").value,  # name recorded with every episode
            reset=declare("reset", "").value or None,  # scene | operator; "" = scene on the sim only
        )
        if not store_dir:
            raise ValueError("parameter store_dir is required (the episode store accepted demos go to)")
        if source not in SOURCES:
            raise ValueError(f"parameter source {source!r} is not one of {SOURCES}")
        if camera_source not in ("", *CAMERA_SOURCES):
            raise ValueError(f"parameter camera_source {camera_source!r} is not one of {CAMERA_SOURCES}")
        if backend not in BACKENDS:
            raise ValueError(
                f"parameter backend {backend!r} is not one of {BACKENDS}: a real arm is reached through the "
                "robot_driver (backend driver), which holds its one connection; the arm's backend and "
                "options are the robot_driver's parameters"
            )
        if backend == "driver" and camera_source == "robot":
            raise ValueError(f"backend driver records the frames on {TOPIC_CAMERA}: camera_source is topic")
        store = EpisodeStore.create(
            store_dir, StoreInfo(fps=policy_rate, image_size=(image_size, image_size)), exist_ok=True
        )
        self.bag_dir = Path(bag_dir) if bag_dir else Path(store_dir) / "mcap"
        self._report_leftovers(store)

        inputs = ReentrantCallbackGroup()
        self.robot: Robot
        if backend == "driver":
            self.robot = RosRobot(
                self,
                get_arm(robot_name),
                1.0 / policy_rate,
                feedback_timeout_s=feedback_timeout_s,
                connect_timeout_s=driver_timeout_s,
                callback_group=inputs,
            )
        else:
            self.robot = make_robot("sim", robot=robot_name, image_size=image_size, policy_hz=policy_rate)
        self.worker.submit(self.robot.connect).result()  # driver: RobotError naming the silent topic
        self.keyboard = self.teleop = None
        if source == "keyboard":
            self.keyboard = self.teleop = KeyboardTeleop(driver=CartesianDriver(self.robot.arm))
        elif source == "spacemouse":
            self.teleop = TwistTeleop(self.robot.dt, driver=CartesianDriver(self.robot.arm))
        else:
            self.teleop = LeaderArmTeleop(self.robot.arm)
        self.camera = None
        robot_camera = OBS_IMAGE in self.robot.observation_features
        if camera_source == "topic" or (not camera_source and not robot_camera):
            self.camera = TopicCamera(image_size, camera_timeout_s)
            self.create_subscription(
                Image, TOPIC_CAMERA, self._on_image, qos_profile_sensor_data, callback_group=inputs
            )
        self.session = DemoSession(
            self.robot, self.teleop, store, self.bag_dir, config, camera=self.camera, announce=self.announce
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
        self.serve(self.robot.arm.name, self.session)
        if stdin_keys and sys.stdin.isatty():
            threading.Thread(target=self._read_terminal, daemon=True).start()
        frames = f"camera {TOPIC_CAMERA}" if self.camera else "camera of the robot"
        self.get_logger().info(
            f"demo station: {self.robot!r}, source {source}, {frames}, {self.session.reset_mode.value} "
            f"reset, store {store_dir}, bags {self.bag_dir}; keys: {KEY_HELP}"
        )

    def _report_leftovers(self, store: EpisodeStore) -> None:
        for take in incomplete_takes(store.root):
            self.get_logger().warning(
                f"incomplete take of request {take.get('request_id', '?')} from a recorder that was stopped "
                f"mid-take: not stored, not used ({take['marker']}; EpisodeStore.recover removes it)"
            )
        for episode_id in export_missing_bags(store, self.bag_dir):
            self.get_logger().info(f"re-exported the missing MCAP bag of accepted {episode_id}")

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
        if msg.data not in SESSION_COMMANDS:
            known = ", ".join(SESSION_COMMANDS)
            self.get_logger().warning(f"unknown operator command {msg.data!r}; known: {known}")
            return
        self.session.command(msg.data)

    def _on_image(self, msg: Image) -> None:
        try:
            self.camera.on_msg(msg)
        except ValueError as error:
            self.get_logger().warning(f"camera frame ignored: {error}", throttle_duration_sec=5.0)

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

    def destroy_node(self) -> None:
        if self.robot.is_connected:
            self.worker.submit(self.robot.disconnect).result()
        super().destroy_node()


def main(args: list[str] | None = None) -> None:
    spin_node(DemoRecorder, args, threads=4)


if __name__ == "__main__":
    main()

"""The `piper_ros` backend: an AgileX PiPER through AgileX's ROS 2 driver (piper_ros, `piper_single_ctrl`).

For workstations where that driver already owns the CAN port. Its interface, as the driver defines it:

- `joint_ctrl_single` (sensor_msgs/JointState, subscribed by the driver): `joint1..joint6` targets
  [rad] and `joint7`, the gripper opening [m] (the driver clamps it to 0..0.08 m); `velocity[6]`, when
  non-zero, is the MOVE J speed in percent;
- `joint_states_single` (sensor_msgs/JointState, published by the driver): the same layout, measured;
- `enable_srv` (piper_msgs/srv/Enable: `bool enable_request` -> `bool enable_response`): motor enable.

Targets are clamped to the arm's limits in 0.001 degree with the piper_sdk backend's helpers before
they are converted back to radians, so both transports command exactly the same integers (older
driver releases convert with 1000 * 180 / 3.14 instead of pi, 0.05% more; the limits in
`sim/arms.py` are the arm's own, so keep that in mind at the extremes).

The backend runs its own rclpy context and node on a background executor thread, so it works inside
another node (the demo recorder) as well as in a plain script. `piper_msgs` is imported only when the
backend enables the motors at connect: it ships with piper_ros and is not on PyPI; without it,
connect fails with a clear RobotFaultError (or set `enable_on_connect=False` when the driver runs with
`auto_enable:=true`). Lost feedback makes the robot hold and fault, as in the piper_sdk backend.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from robocoach_skills.constants import OBS_PROPRIO
from robocoach_skills.robots.base import RobotFaultError, RobotHealth, register_robot
from robocoach_skills.robots.piper import (
    MICROMETRES_PER_METRE,
    PiperBase,
    joint_targets_millideg,
    micrometres_to_opening,
    millideg_to_rad,
    opening_to_micrometres,
)

DRIVER_JOINTS = ("joint1", "joint2", "joint3", "joint4", "joint5", "joint6")
DRIVER_GRIPPER = "joint7"  # the driver's name for the gripper opening [m] in commands
SPEED_INDEX = 6  # velocity[6] of a command: MOVE J speed [%]
ENABLE_SRV_TYPE = "piper_msgs/srv/Enable"


@dataclass
class PiperRosConfig:
    """Where the driver's interface lives and how fast the arm may move."""

    namespace: str = ""  # prefix of the driver's topics and service, e.g. "/left_arm"
    command_topic: str = "joint_ctrl_single"  # JointState commands to the driver
    feedback_topic: str = "joint_states_single"  # JointState measurements from the driver
    enable_service: str = "enable_srv"  # piper_msgs/srv/Enable
    enable_on_connect: bool = True  # call enable_srv at connect (False: the driver auto-enables)
    speed_percent: int = 50  # MOVE J speed as a percentage of the arm's maximum, 1..100
    policy_hz: float = 10.0  # action rate [Hz]; the velocity limit is applied over 1/policy_hz
    feedback_timeout: float = 0.5  # no joint state for this long -> hold and fault [s]
    connect_timeout: float = 5.0  # wait this long for feedback and for the enable answer [s]

    def __post_init__(self) -> None:
        for name in ("command_topic", "feedback_topic", "enable_service"):
            if not getattr(self, name):
                raise ValueError(
                    f"PiperRosConfig.{name} must name a ROS interface, got {getattr(self, name)!r}"
                )
        if not 1 <= self.speed_percent <= 100:
            raise ValueError(f"PiperRosConfig.speed_percent {self.speed_percent} outside [1, 100]")
        for name in ("policy_hz", "feedback_timeout", "connect_timeout"):
            if not getattr(self, name) > 0:
                raise ValueError(f"PiperRosConfig.{name} must be positive, got {getattr(self, name)}")

    def name(self, relative: str) -> str:
        """A driver interface name under `namespace`."""
        return f"{self.namespace.rstrip('/')}/{relative}" if self.namespace else relative


def _enable_type() -> Any:
    try:
        from piper_msgs.srv import Enable
    except ImportError as error:
        raise RobotFaultError(
            f"cannot enable the PiPER: {ENABLE_SRV_TYPE} is not importable ({error}); source the workspace "
            f"that built AgileX's piper_ros, or run its driver with auto_enable:=true and set "
            f"enable_on_connect=False"
        ) from error
    return Enable


@register_robot("piper_ros")
class PiperRosRobot(PiperBase):
    """A PiPER (6 joints + parallel gripper) commanded through piper_ros's JointState interface."""

    config_class = PiperRosConfig
    config: PiperRosConfig

    def __init__(self, config: PiperRosConfig):
        super().__init__(config)
        self._ros: tuple[Any, Any, Any, threading.Thread] | None = None  # context, node, executor, spinner
        self._publisher: Any = None
        self._lock = threading.Lock()
        self._positions: np.ndarray | None = None  # measured joints [rad] + gripper opening 0..1
        self._stamp = -np.inf  # monotonic receive time of the last joint state

    @property
    def is_connected(self) -> bool:
        return self._ros is not None

    def _describe(self) -> str:
        return f"{self.name} at {self.config.name(self.config.feedback_topic)!r}"

    # ------------------------------------------------------------------ connection
    def _connect(self) -> None:
        # rclpy only here: the interface and the other backends work without a ROS install.
        import rclpy
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.qos import QoSProfile, QoSReliabilityPolicy
        from sensor_msgs.msg import JointState

        cfg = self.config
        context = rclpy.context.Context()
        rclpy.init(context=context)
        node = rclpy.create_node("robocoach_piper_ros", context=context)
        executor = SingleThreadedExecutor(context=context)
        executor.add_node(node)
        spinner = threading.Thread(target=executor.spin, daemon=True, name="piper_ros")
        # The driver subscribes and publishes with depth 1, reliable.
        qos = QoSProfile(depth=1, reliability=QoSReliabilityPolicy.RELIABLE)
        self._publisher = node.create_publisher(JointState, cfg.name(cfg.command_topic), qos)
        node.create_subscription(JointState, cfg.name(cfg.feedback_topic), self._on_joint_state, qos)
        self._ros = (context, node, executor, spinner)
        spinner.start()
        try:
            self._bring_up(node)
        except BaseException:
            self._disconnect()
            raise

    def _bring_up(self, node: Any) -> None:
        cfg = self.config
        deadline = time.monotonic() + cfg.connect_timeout
        # Both directions must be matched: a command published before the driver's subscription is
        # discovered would be dropped.
        while not (self._feedback_fresh() and self._publisher.get_subscription_count() > 0):
            if time.monotonic() > deadline:
                raise RobotFaultError(
                    f"no joint state on {cfg.name(cfg.feedback_topic)!r}, or no subscriber of "
                    f"{cfg.name(cfg.command_topic)!r}, within {cfg.connect_timeout} s "
                    f"(is piper_ros's piper_single_ctrl running on this ROS domain?)"
                )
            time.sleep(0.01)
        if cfg.enable_on_connect:
            self._enable(node, _enable_type())
        self._hold()

    def _enable(self, node: Any, enable_type: Any) -> None:
        cfg = self.config
        client = node.create_client(enable_type, cfg.name(cfg.enable_service))
        if not client.wait_for_service(timeout_sec=cfg.connect_timeout):
            raise RobotFaultError(
                f"{cfg.name(cfg.enable_service)!r} is not offered within {cfg.connect_timeout} s"
            )
        done = threading.Event()
        future = client.call_async(enable_type.Request(enable_request=True))
        future.add_done_callback(lambda _f: done.set())
        if not done.wait(cfg.connect_timeout) or not future.result().enable_response:
            raise RobotFaultError(f"the PiPER driver did not confirm enabling within {cfg.connect_timeout} s")

    def _disconnect(self) -> None:
        ros, self._ros = self._ros, None
        if ros is None:
            return
        context, node, executor, spinner = ros
        executor.shutdown()
        node.destroy_node()
        context.try_shutdown()
        spinner.join(timeout=2.0)
        self._publisher, self._positions, self._stamp = None, None, -np.inf

    # ------------------------------------------------------------------ feedback
    def _on_joint_state(self, msg: Any) -> None:
        n = self.arm.n_joints
        if len(msg.position) < n + 1:
            return  # not the driver's layout (6 joints + gripper); the stale-feedback check will tell
        position = np.asarray(msg.position, dtype=np.float64)
        opening = micrometres_to_opening(round(position[n] * MICROMETRES_PER_METRE), self.arm.gripper.stroke)
        with self._lock:
            self._positions, self._stamp = np.append(position[:n], opening), time.monotonic()

    def _feedback_age(self) -> float:
        with self._lock:
            return time.monotonic() - self._stamp

    def _health(self) -> RobotHealth:
        return self._feedback_health("joint states")

    def _measured(self) -> np.ndarray:
        with self._lock:
            return self._positions.copy()

    def _joint_positions(self) -> np.ndarray:
        return self._measured()[: self.arm.n_joints]

    def _observe(self) -> dict[str, np.ndarray]:
        return {OBS_PROPRIO: self._measured().astype(np.float32)}

    # ------------------------------------------------------------------ commanding
    def _send(self, joints: np.ndarray, gripper: float) -> None:
        from sensor_msgs.msg import JointState

        targets = [millideg_to_rad(v) for v in joint_targets_millideg(self.arm, joints)]
        opening_m = opening_to_micrometres(gripper, self.arm.gripper.stroke) / MICROMETRES_PER_METRE
        velocity = [0.0] * (self.arm.n_joints + 1)
        velocity[SPEED_INDEX] = float(self.config.speed_percent)
        msg = JointState(
            name=[*DRIVER_JOINTS, DRIVER_GRIPPER], position=[*targets, opening_m], velocity=velocity
        )
        msg.header.stamp = self._ros[1].get_clock().now().to_msg()
        self._publisher.publish(msg)

    def _apply_action(self, applied: np.ndarray) -> None:
        n = self.arm.n_joints
        self._send(applied[:n], float(applied[n]))

    def _hold(self) -> None:
        """Target the measured pose; with stale feedback there is no pose to trust, so send nothing."""
        if self._feedback_fresh():
            measured = self._measured()
            self._send(measured[: self.arm.n_joints], float(measured[self.arm.n_joints]))

    def _estop(self) -> None:
        """piper_ros offers no emergency-stop topic: hold, and the latched fault refuses further motion."""
        self._hold()

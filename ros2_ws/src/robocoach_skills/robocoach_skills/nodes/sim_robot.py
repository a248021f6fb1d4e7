"""`sim_robot` node: the MuJoCo embedded robot on the ROS graph, as a real arm driver would be.

Publishes `sensor_msgs/JointState` and the camera `sensor_msgs/Image` at their own rates, steps the
physics at the policy rate toward the latest accepted joint command, and offers reset-with-seed.
A command that is NaN, of the wrong length, names unknown joints, leaves the joint limits or moves
faster than the velocity limits is refused with a logged reason, and the arm holds where it is.
"""

from __future__ import annotations

import numpy as np
from rclpy.node import Node
from rclpy.qos import QoSHistoryPolicy, QoSProfile, QoSReliabilityPolicy, qos_profile_sensor_data
from sensor_msgs.msg import Image, JointState

from robocoach_msgs.srv import ResetScene
from robocoach_skills.constants import (
    FRAME_CAMERA,
    GRIPPER_JOINT,
    SERVICE_RESET_SCENE,
    TOPIC_CAMERA,
    TOPIC_JOINT_COMMAND,
    TOPIC_JOINT_STATES,
)
from robocoach_skills.nodes.conversions import image_to_msg, joint_state_to_command
from robocoach_skills.nodes.spin import spin_node
from robocoach_skills.sim.arms import check_joint_command
from robocoach_skills.sim.scene import SceneConfig, SimScene
from robocoach_skills.tasks import get_composition, initial_region, training_compositions

# Commands must not be dropped or reordered: reliable, keep the last few.
COMMAND_QOS = QoSProfile(
    depth=5, reliability=QoSReliabilityPolicy.RELIABLE, history=QoSHistoryPolicy.KEEP_LAST
)


class SimRobot(Node):
    def __init__(self) -> None:
        super().__init__("sim_robot")
        declare = self.declare_parameter
        robot = declare("robot", "franka").value  # embodiment: franka or piper
        image_size = declare("image_size", 64).value  # camera image edge [px]
        policy_rate = declare("policy_rate_hz", 10.0).value  # physics advance / command rate [Hz]
        joint_state_rate = declare("joint_state_rate_hz", 50.0).value  # [Hz]
        camera_rate = declare("camera_rate_hz", 10.0).value  # [Hz]
        composition = declare("composition", "").value  # initial scene; "" = the first training task
        seed = declare("seed", 0).value  # initial-state seed of that scene

        self.scene = SimScene(SceneConfig(robot=robot, image_size=image_size, policy_hz=policy_rate))
        self.arm = self.scene.arm
        self.joint_names = (*self.arm.joint_names, GRIPPER_JOINT)
        self._command: np.ndarray | None = None  # latest accepted command; None = hold
        self.rejected = 0
        self._reset(
            get_composition(robot, composition) if composition else training_compositions(robot)[0], seed
        )

        self._joint_pub = self.create_publisher(JointState, TOPIC_JOINT_STATES, qos_profile_sensor_data)
        self._camera_pub = self.create_publisher(Image, TOPIC_CAMERA, qos_profile_sensor_data)
        self.create_subscription(JointState, TOPIC_JOINT_COMMAND, self._on_command, COMMAND_QOS)
        self.create_service(ResetScene, SERVICE_RESET_SCENE, self._on_reset)
        self.create_timer(1.0 / policy_rate, self._control_tick)
        self.create_timer(1.0 / joint_state_rate, self._publish_joint_state)
        self.create_timer(1.0 / camera_rate, self._publish_camera)
        self.get_logger().info(
            f"{robot} sim robot: policy {policy_rate} Hz, joint states {joint_state_rate} Hz, "
            f"camera {camera_rate} Hz at {image_size}x{image_size}"
        )

    def _reset(self, composition, seed: int) -> str:
        self.scene.reset(composition, seed)
        self._command = None
        region = initial_region(composition, seed)
        self.get_logger().info(f"scene reset to {composition.name!r}, seed {seed} ({region} region)")
        return region

    def _on_command(self, msg: JointState) -> None:
        try:
            command = joint_state_to_command(msg, self.arm.joint_names)
        except ValueError as error:
            return self._refuse(str(error))
        reason = check_joint_command(self.arm, command, self.scene.joint_positions(), self.scene.dt)
        if reason is not None:
            return self._refuse(reason)
        if len(command) == self.arm.n_joints:  # no gripper channel: keep the gripper as commanded before
            command = np.append(command, self.scene.joint_targets()[-1])
        self._command = command

    def _refuse(self, reason: str) -> None:
        self.rejected += 1
        self.get_logger().warning(
            f"joint command refused ({reason}); holding position [{self.rejected} refused]"
        )
        self._command = None
        self.scene.hold()

    def _control_tick(self) -> None:
        target = self._command if self._command is not None else self.scene.joint_targets()
        self.scene.apply_action(target)

    def _publish_joint_state(self) -> None:
        positions = [*self.scene.joint_positions().tolist(), self.scene.gripper_opening()]
        msg = JointState(name=list(self.joint_names), position=positions)
        msg.header.stamp = self.get_clock().now().to_msg()
        self._joint_pub.publish(msg)

    def _publish_camera(self) -> None:
        self._camera_pub.publish(
            image_to_msg(self.scene.render(), self.get_clock().now().to_msg(), FRAME_CAMERA)
        )

    def _on_reset(self, request: ResetScene.Request, response: ResetScene.Response) -> ResetScene.Response:
        try:
            composition = get_composition(self.arm.name, request.composition)
        except (KeyError, ValueError) as error:
            response.success, response.message = False, str(error)
            return response
        response.region = self._reset(composition, int(request.seed))
        response.success, response.message = True, f"{composition.name} seed {request.seed}"
        return response


def main(args: list[str] | None = None) -> None:
    spin_node(SimRobot, args)


if __name__ == "__main__":
    main()

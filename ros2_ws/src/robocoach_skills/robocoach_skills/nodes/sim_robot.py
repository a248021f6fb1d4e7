"""`sim_robot` node: the `robot_driver` over the MuJoCo `sim` backend, plus what only a simulation has.

Everything topic-facing (rates, command handling, hold, e-stop, status) is `RobotDriver`'s. Added
here: reset-with-seed (ResetScene); the physics clock, a timer that runs the scene at wall-clock
speed while commands only retarget its servos (`SimRobotConfig.lockstep` off), so the simulated arm
moves between and during commands as a real one does, and a command takes effect when it arrives;
joint states read from the scene without rendering (`observe()` renders the camera, too slow at the
joint-state rate); and by default `command_check: refuse`, so a policy run in the sim shows when it
leans on clipping.
"""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np
from std_msgs.msg import String

from robocoach_msgs.srv import ResetScene
from robocoach_skills.constants import SERVICE_RESET_SCENE
from robocoach_skills.nodes.robot_driver import COMMAND_QOS, CommandCheck, RobotDriver
from robocoach_skills.nodes.spin import spin_node
from robocoach_skills.robots import SimRobot
from robocoach_skills.tasks import get_composition, initial_region

__all__ = ["COMMAND_QOS", "SimRobotNode", "main"]  # COMMAND_QOS: what command publishers use


class SimRobotNode(RobotDriver):
    robot: SimRobot
    default_command_check = CommandCheck.REFUSE

    def __init__(self) -> None:
        super().__init__("sim_robot", backend="sim")
        physics_rate = self.declare_parameter("physics_rate_hz", 100.0).value  # physics clock ticks [Hz]
        self._physics_dt = self.robot.scene.config.physics_dt  # [s]
        self._physics_time = time.monotonic()  # wall time the physics has run to [s]
        self.create_timer(1.0 / physics_rate, self._physics_tick)
        self.create_service(ResetScene, SERVICE_RESET_SCENE, self._on_reset)
        # Privileged ground truth, for evaluation and tests only: no policy or judge subscribes to it.
        self._truth_pub = self.create_publisher(String, "~/ground_truth", 10)
        self.create_timer(
            1.0 / self.declare_parameter("ground_truth_rate_hz", 5.0).value, self._publish_truth
        )

    def backend_options(self, options: dict[str, Any]) -> dict[str, Any]:
        declare = self.declare_parameter
        robot = self.get_parameter("robot").value  # the driver's; "" = SimRobotConfig's default arm
        return {
            **({"robot": robot} if robot else {}),
            "image_size": declare("image_size", 64).value,  # camera image edge [px]
            "composition": declare("composition", "").value,  # initial scene; "" = the first training task
            "seed": declare("seed", 0).value,  # initial-state seed of that scene
            "lockstep": False,  # the physics clock below runs the scene
            **options,
        }

    def measured_proprio(self) -> np.ndarray:
        scene = self.robot.scene
        return np.append(scene.joint_positions(), scene.gripper_opening())

    def _physics_tick(self) -> None:
        """Run the physics up to now. A node that fell behind (a slow render, a loaded machine) runs at
        most one policy period per tick: the scene then runs slower than the wall clock rather than jump."""
        now, most = time.monotonic(), self.robot.scene.config.substeps
        steps = int((now - self._physics_time) / self._physics_dt)
        if steps > most:
            steps, self._physics_time = most, now
        else:
            self._physics_time += steps * self._physics_dt
        if steps:
            self.robot.advance(steps)

    def _publish_truth(self) -> None:
        """JSON: composition, active subtask and its ground-truth progress and success."""
        scene = self.robot.scene
        progress, success = self.robot.subtask_status()
        truth = {
            "composition": scene.composition.name,
            "seed": scene.seed,
            "active_subtask": scene.active_subtask,
        }
        self._truth_pub.publish(String(data=json.dumps({**truth, "progress": progress, "success": success})))

    def _on_reset(self, request: ResetScene.Request, response: ResetScene.Response) -> ResetScene.Response:
        try:
            composition = get_composition(self.arm.name, request.composition)
        except (KeyError, ValueError) as error:
            response.success, response.message = False, str(error)
            return response
        self._command = None
        self.robot.reset_for_subtask(composition, 0, int(request.seed))
        self._physics_time = time.monotonic()  # the reset's own settling is not time to catch up on
        response.region = initial_region(composition, int(request.seed))
        self.get_logger().info(
            f"scene reset to {composition.name!r}, seed {request.seed} ({response.region} region)"
        )
        response.success, response.message = True, f"{composition.name} seed {request.seed}"
        return response


def main(args: list[str] | None = None) -> None:
    spin_node(SimRobotNode, args)


if __name__ == "__main__":
    main()

"""The `sim` backend: the embedded MuJoCo scene behind the robot interface.

Thin on purpose: `SimScene` already applies only clipped commands; this class adds the interface's
connection guard and fault latching. `scene` stays reachable for what only a simulation has
(resets to a seeded task, privileged state for scoring).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from robocoach_skills.composition import Composition
from robocoach_skills.constants import ROBOTS
from robocoach_skills.operator import ScriptedOperator
from robocoach_skills.robots.base import Robot, register_robot
from robocoach_skills.sim.arms import get_arm
from robocoach_skills.sim.scene import SceneConfig, SimScene
from robocoach_skills.tasks import get_composition, training_compositions


@dataclass
class SimRobotConfig:
    """The simulated arm and the scene it starts in."""

    robot: str = "franka"  # embodiment, one of constants.ROBOTS
    image_size: int = 64  # camera image edge [px]; see SceneConfig
    render: bool = True  # False: proprio-only observations (no GL needed)
    policy_hz: float = 10.0  # action rate [Hz]; the velocity limit is applied over 1/policy_hz
    composition: str = ""  # task the scene is reset to at connect; "" = the first training task
    seed: int = 0  # initial-state seed of that reset
    # True: send_action runs the physics through one policy period (in-process loops). False: it only
    # retargets the servos and `advance` runs the physics, on the caller's clock (the sim_robot node).
    lockstep: bool = True

    def __post_init__(self) -> None:
        if self.robot not in ROBOTS:
            raise ValueError(f"SimRobotConfig.robot {self.robot!r} is not one of {ROBOTS}")
        if not self.policy_hz > 0:
            raise ValueError(f"SimRobotConfig.policy_hz must be positive, got {self.policy_hz}")

    def scene_config(self) -> SceneConfig:
        return SceneConfig(
            robot=self.robot, image_size=self.image_size, render=self.render, policy_hz=self.policy_hz
        )


@register_robot("sim")
class SimRobot(Robot):
    """A `SimScene` that is created at connect and closed at disconnect."""

    config_class = SimRobotConfig

    def __init__(self, config: SimRobotConfig):
        super().__init__(
            get_arm(config.robot), 1.0 / config.policy_hz, config.image_size if config.render else None
        )
        self.config = config
        self.scene: SimScene | None = None

    @property
    def is_connected(self) -> bool:
        return self.scene is not None

    def _connect(self) -> None:
        scene = SimScene(self.config.scene_config())
        name = self.config.composition
        composition = (
            get_composition(self.arm.name, name) if name else training_compositions(self.arm.name)[0]
        )
        scene.reset(composition, self.config.seed)
        self.scene = scene

    def _disconnect(self) -> None:
        scene, self.scene = self.scene, None
        if scene is not None:
            scene.close()

    def _observe(self) -> dict[str, np.ndarray]:
        return self.scene.observe()

    def _joint_positions(self) -> np.ndarray:
        return self.scene.joint_positions()

    def _apply_action(self, applied: np.ndarray) -> None:
        if self.config.lockstep:
            self.scene.apply_action(applied)
        else:
            self.scene.command(applied)

    def advance(self, physics_steps: int) -> None:
        """Let `physics_steps` physics steps of time pass (without lockstep, nothing else moves the arm)."""
        self._require_connected()
        self.scene.run(physics_steps)

    def _hold(self) -> None:
        self.scene.hold()

    def _estop(self) -> None:
        self.scene.hold()

    # ------------------------------------------------------------------ sim only (demo recorder)
    def reset_for_subtask(self, composition: Composition, index: int, seed: int) -> bool:
        """Put the scene where subtask `index` of `composition` starts from initial-state `seed`.

        The subtasks before it are done by the scripted operator, unrecorded (a human demonstrating
        subtask 2 starts where subtask 1 left the scene). Returns whether they all succeeded; when
        not, the scene is not in a state the subtask can start from.
        """
        self._require_connected()
        if index == 0:
            self.scene.reset(composition, seed)
            return True
        before = ScriptedOperator().demo_subtask(self.scene, composition, index - 1, seed)
        self.scene.start_subtask(index)
        return before.success and before.metadata["prerequisites_ok"]

    def subtask_status(self) -> tuple[float, bool]:
        """Ground-truth (progress 0..1, success) of the scene's active subtask."""
        self._require_connected()
        index = self.scene.active_subtask
        return self.scene.subtask_progress(index), self.scene.subtask_success(index)

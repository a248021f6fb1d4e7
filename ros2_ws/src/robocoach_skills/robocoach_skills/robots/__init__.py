"""One robot interface, several backends chosen by registered name.

>>> from robocoach_skills.robots import robot_backends
>>> sorted(robot_backends())
['franka', 'piper_ros', 'piper_sdk', 'sim']

Importing this package registers every backend; hardware SDKs are imported only when a backend
connects, so this import works without them.
"""

from robocoach_skills.robots import franka, piper, piper_ros, sim_robot  # noqa: F401 (import registers the backends)
from robocoach_skills.robots.base import (
    ACTION_KEY,
    Feature,
    Robot,
    RobotAlreadyConnectedError,
    RobotError,
    RobotFaultError,
    RobotHealth,
    RobotNotConnectedError,
    make_robot,
    register_robot,
    robot_backends,
)
from robocoach_skills.robots.franka import FrankaConfig, FrankaRobot
from robocoach_skills.robots.piper import PiperConfig, PiperRobot
from robocoach_skills.robots.sim_robot import SimRobot, SimRobotConfig

__all__ = [
    "ACTION_KEY",
    "Feature",
    "FrankaConfig",
    "FrankaRobot",
    "PiperConfig",
    "PiperRobot",
    "Robot",
    "RobotAlreadyConnectedError",
    "RobotError",
    "RobotFaultError",
    "RobotHealth",
    "RobotNotConnectedError",
    "SimRobot",
    "SimRobotConfig",
    "make_robot",
    "register_robot",
    "robot_backends",
]

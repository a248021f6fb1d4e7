"""The one robot interface the executor and the demo recorder see, and the registry of its backends.

Shaped after LeRobot's `Robot`: features are declared without connecting, connection state is guarded,
and `send_action` returns the action actually applied. The safety rules live here, not in the
backends, so every backend enforces them the same way:

- an action is `n_joints` absolute joint targets [rad] + one gripper command in [0, 1];
- malformed actions (wrong length, NaN) are refused with ValueError, never "repaired";
- everything else is clipped with `sim.arms.clip_joint_command` (position limits, and the velocity
  limit over one policy period measured from the *measured* joint positions) before a backend sees it;
- a fault (lost feedback, e-stop, backend error) makes the robot hold and latches: every later
  action raises `RobotFaultError` until the robot is disconnected and connected again, while
  `observe()` keeps working whenever the measurements themselves are fresh.

Errors are `ConnectionError` subclasses so callers that only care "the robot is unusable" catch one type.

>>> from robocoach_skills.robots import make_robot
>>> robot = make_robot("sim", robot="piper", render=False)
>>> robot.action_features["action"]
Feature(shape=(7,), dtype='float32')
>>> robot.observe()
Traceback (most recent call last):
...
robocoach_skills.robots.base.RobotNotConnectedError: sim (piper) is not connected; call connect() first
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from robocoach_skills.constants import OBS_IMAGE, OBS_PROPRIO
from robocoach_skills.sim.arms import ArmSpec, clip_joint_command

# Key of the single entry of `action_features` (LeRobot names its action tensor "action" too).
ACTION_KEY = "action"
ESTOP_REASON = "emergency stop requested"


class RobotError(ConnectionError):
    """Base of every robot error: the robot cannot (or must not) be used right now."""


class RobotNotConnectedError(RobotError):
    """A method that needs the robot was called before `connect()` or after `disconnect()`."""


class RobotAlreadyConnectedError(RobotError):
    """`connect()` was called on a connected robot (a second connection would fight the first)."""


class RobotFaultError(RobotError):
    """The robot is holding because of a fault; `reason` says which, for the operator."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Feature:
    """Shape and dtype of one observation or action entry."""

    shape: tuple[int, ...]
    dtype: str  # numpy dtype name


@dataclass(frozen=True)
class RobotHealth:
    """Whether the robot may move, and if not, why."""

    ok: bool
    reason: str = ""  # empty when ok

    @classmethod
    def fault(cls, reason: str) -> RobotHealth:
        return cls(ok=False, reason=reason)


HEALTHY = RobotHealth(ok=True)


class Robot(abc.ABC):
    """One arm with a gripper, simulated or real.

    Subclasses set `config_class`, build their `ArmSpec` and policy period in `__init__`, and implement
    the underscored hooks; the public methods here do the guarding, validation, clipping and fault
    latching, so a backend cannot forget them.
    """

    name: ClassVar[str] = ""  # registry name, set by @register_robot
    config_class: ClassVar[type]  # dataclass whose fields are the keyword arguments of make_robot()

    def __init__(self, arm: ArmSpec, dt: float, camera_size: int | None = None):
        if dt <= 0:
            raise ValueError(f"policy period dt must be positive, got {dt}")
        self.arm = arm
        self.dt = dt  # policy period [s]: the velocity limit is applied over this time
        self._camera_size = camera_size  # square image edge [px], None when the backend has no camera
        self._fault: str | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, arm={self.arm.name!r}, connected={self.is_connected})"

    def _describe(self) -> str:
        return f"{self.name} ({self.arm.name})"

    # ------------------------------------------------------------------ features (no connection needed)
    @property
    def observation_features(self) -> dict[str, Feature]:
        features = {OBS_PROPRIO: Feature((self.arm.n_joints + 1,), "float32")}
        if self._camera_size is not None:
            features[OBS_IMAGE] = Feature((self._camera_size, self._camera_size, 3), "uint8")
        return features

    @property
    def action_features(self) -> dict[str, Feature]:
        return {ACTION_KEY: Feature((self.arm.action_dim,), "float32")}

    # ------------------------------------------------------------------ connection
    @property
    @abc.abstractmethod
    def is_connected(self) -> bool: ...

    def connect(self) -> None:
        """Open the transport, bring the arm into a commandable state and clear latched faults."""
        if self.is_connected:
            raise RobotAlreadyConnectedError(f"{self._describe()} is already connected")
        self._fault = None
        self._connect()

    def disconnect(self) -> None:
        """Hold (if possible) and release the transport."""
        self._require_connected()
        try:
            if self._fault is None:
                self._hold()
        finally:
            self._disconnect()

    def _require_connected(self) -> None:
        if not self.is_connected:
            raise RobotNotConnectedError(f"{self._describe()} is not connected; call connect() first")

    # ------------------------------------------------------------------ observing
    def observe(self) -> dict[str, np.ndarray]:
        """Proprioception (joint positions [rad] + gripper opening 0..1, float32), plus the camera image
        when the backend has one. Raises RobotFaultError while the measurements cannot be trusted (a
        latched fault alone, such as an e-stop, does not stop the operator from seeing the robot)."""
        self._require_connected()
        self._check_live_health()
        return self._observe()

    def health(self) -> RobotHealth:
        """A latched fault first, then the backend's live checks (e.g. feedback age)."""
        self._require_connected()
        if self._fault is not None:
            return RobotHealth.fault(self._fault)
        return self._health()

    # ------------------------------------------------------------------ acting
    def send_action(self, action: Any) -> np.ndarray:
        """Command `n_joints` joint targets [rad] + a gripper command [0, 1]; returns what was applied.

        Raises ValueError for a malformed action, RobotFaultError (after holding) when the robot is faulted.
        """
        self._require_connected()
        a = np.asarray(action, dtype=np.float64).reshape(-1)
        if a.size != self.arm.action_dim:
            raise ValueError(
                f"action has {a.size} values; {self.arm.name} takes {self.arm.action_dim} "
                f"({self.arm.n_joints} joint targets + 1 gripper command)"
            )
        self._check_live_health()
        if self._fault is not None:
            raise RobotFaultError(self._fault)
        applied = clip_joint_command(self.arm, a, self._joint_positions(), self.dt)  # ValueError on NaN
        self._apply_action(applied)
        return applied

    def hold(self) -> None:
        """Stop where the arm is now (the current measured positions become the targets)."""
        self._require_connected()
        self._hold()

    def estop(self) -> None:
        """Stop at once and latch a fault: no further action is accepted until reconnecting."""
        self._require_connected()
        self._fault = ESTOP_REASON
        self._estop()

    def _check_live_health(self) -> None:
        """Run the backend's live checks; a new fault is latched and the robot holds, then it raises.

        The error leads with the fault latched first (an e-stop, say), which is the cause of what the live
        checks see after it (the backend's control process ending, say).
        """
        health = self._health()
        if health.ok:
            return
        if self._fault is None:  # first sighting: latch it and stop commanding motion
            self._fault = health.reason
            self._hold_on_fault()
        if health.reason == self._fault:
            raise RobotFaultError(health.reason)
        raise RobotFaultError(f"{self._fault}; since then: {health.reason}")

    # ------------------------------------------------------------------ backend hooks
    @abc.abstractmethod
    def _connect(self) -> None: ...

    @abc.abstractmethod
    def _disconnect(self) -> None: ...

    @abc.abstractmethod
    def _observe(self) -> dict[str, np.ndarray]: ...

    @abc.abstractmethod
    def _joint_positions(self) -> np.ndarray:
        """Measured joint positions [rad], shape (n_joints,)."""

    @abc.abstractmethod
    def _apply_action(self, applied: np.ndarray) -> None:
        """Send an already clipped action (joint targets + gripper command)."""

    @abc.abstractmethod
    def _hold(self) -> None: ...

    @abc.abstractmethod
    def _estop(self) -> None: ...

    def _health(self) -> RobotHealth:
        """Live checks of the backend; healthy unless overridden."""
        return HEALTHY

    def _hold_on_fault(self) -> None:
        """What holding means once a fault is detected; by default the ordinary hold."""
        self._hold()


# ---------------------------------------------------------------------------------------------- registry
_BACKENDS: dict[str, type[Robot]] = {}


def register_robot(name: str) -> Callable[[type[Robot]], type[Robot]]:
    """Class decorator: make a backend available to `make_robot(name, ...)`."""

    def decorate(cls: type[Robot]) -> type[Robot]:
        if name in _BACKENDS and _BACKENDS[name] is not cls:
            raise ValueError(f"robot backend {name!r} is already registered by {_BACKENDS[name].__name__}")
        cls.name = name
        _BACKENDS[name] = cls
        return cls

    return decorate


def robot_backends() -> tuple[str, ...]:
    """Names of the registered backends."""
    return tuple(_BACKENDS)


def make_robot(name: str, **config: Any) -> Robot:
    """Build (not connect) the backend `name`; `config` are the fields of its config dataclass."""
    try:
        cls = _BACKENDS[name]
    except KeyError:
        raise ValueError(f"unknown robot backend {name!r}; known backends: {', '.join(_BACKENDS)}") from None
    return cls(cls.config_class(**config))

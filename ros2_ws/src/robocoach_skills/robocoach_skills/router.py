"""The router: run a task composition by chaining skill experts, one subtask at a time.

A composition is an ordered list of subtasks; the router picks the next unfinished subtask from the
completed prefix and dispatches the expert of its skill. A pluggable completion detector (the
expert's done head for now, the progress judge later) confirms each subtask; a subtask that is not
confirmed within its deadline ends the trial as TIMEOUT(subtask, expert). The router never reads
privileged state: ground truth is the business of whoever watches the trial (see `TrialMonitor`).

    router = Router(policy, RouterConfig(deadline_steps=150))
    trial = router.run(scene, composition, seed=3, monitor=GroundTruthMonitor(scene))
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from robocoach_skills.composition import Composition, Subtask, UnknownSkillError


class SkillPolicy(Protocol):
    """What the router needs from an expert library."""

    def skills(self) -> tuple[str, ...]: ...  # skills with a trained expert

    def reset(self) -> None: ...  # forget queued actions (called at every subtask switch)

    def act(
        self, obs: dict, subtask: Subtask, robot: str, need_done: bool = True
    ) -> tuple[np.ndarray, float]:
        """(action, done probability); with `need_done` False the probability may be NaN: neither the
        detector nor the monitor reads it."""

    def version(self, skill: str) -> int: ...  # active adapter version of the skill's expert


class RobotEnv(Protocol):
    """The robot as the router sees it (the sim scene, or a hardware backend)."""

    def reset(self, composition: Composition, seed: int) -> dict: ...

    def step(self, action: np.ndarray) -> dict: ...


class TrialMonitor:
    """Hooks called as the router moves through a trial; the default watches nothing."""

    reads_done_probability = False  # on_step's done_prob is NaN unless a monitor that reads it says so

    def on_subtask_start(self, index: int) -> None: ...

    def on_subtask_end(self, index: int, confirmed: bool) -> None: ...

    def on_step(self, index: int, obs: dict, done_prob: float) -> None: ...


# ------------------------------------------------------------------------------ completion detectors
class CompletionDetector(ABC):
    """Decides, step by step, whether the active subtask is complete."""

    # Whether update() reads the expert's done probability. One that does not (the judge) spares the
    # expert a vision pass at every step between action chunks: a quarter of a deployed step's time.
    reads_done_probability = True

    @abstractmethod
    def reset(self, subtask: Subtask) -> None: ...

    @abstractmethod
    def update(self, obs: dict, done_prob: float, action: np.ndarray) -> bool:
        """After `action` (the expert's, gripper last) led to `obs`: is the subtask complete?"""


# name -> factory(config, **detector_args); detectors needing more than the config (a loaded judge)
# take it as keyword arguments, passed through Router(detector_args=...).
DETECTORS: dict[str, Callable[..., CompletionDetector]] = {}


def register_detector(name: str):
    def decorate(cls):
        DETECTORS[name] = cls
        return cls

    return decorate


@register_detector("done_head")
class DoneHeadDetector(CompletionDetector):
    """Complete once the expert's done probability stays above `threshold` for `patience` steps."""

    def __init__(self, config: RouterConfig) -> None:
        self.threshold, self.patience, self._streak = config.done_threshold, config.done_patience, 0

    def reset(self, subtask: Subtask) -> None:
        self._streak = 0

    def update(self, obs: dict, done_prob: float, action: np.ndarray) -> bool:
        self._streak = self._streak + 1 if done_prob >= self.threshold else 0
        return self._streak >= self.patience


# ------------------------------------------------------------------------------ the router
@dataclass
class RouterConfig:
    detector: str = "done_head"  # completion detector, a name registered in DETECTORS
    done_threshold: float = 0.5  # done_head: probability that counts as "done"
    done_patience: int = 2  # done_head: consecutive steps above the threshold
    deadline_steps: int = 150  # policy steps a subtask may take before it times out (15 s at 10 Hz)
    skill_deadline_steps: dict[str, int] = field(default_factory=dict)  # per-skill overrides

    def __post_init__(self) -> None:
        if self.detector not in DETECTORS:
            raise ValueError(f"unknown completion detector {self.detector!r}; known: {sorted(DETECTORS)}")
        if self.deadline_steps < 1 or any(v < 1 for v in self.skill_deadline_steps.values()):
            raise ValueError(
                f"deadlines must be >= 1 step, got {self.deadline_steps}, {self.skill_deadline_steps}"
            )

    def deadline(self, skill: str) -> int:
        return self.skill_deadline_steps.get(skill, self.deadline_steps)


OUTCOME_SUCCESS, OUTCOME_TIMEOUT = "SUCCESS", "TIMEOUT"


@dataclass
class TrialResult:
    """One routed trial, as the router saw it (plus whatever a monitor added in `ground_truth`)."""

    composition: str
    robot: str
    seed: int
    skills: list[str]  # the route: expert skill of each subtask
    outcome: str  # OUTCOME_SUCCESS or OUTCOME_TIMEOUT
    timed_out_index: int  # subtask that timed out, -1 when none did
    expert_versions: dict[str, int]  # skill -> adapter version used
    switch_steps: list[int]  # step at which each confirmed subtask was declared done
    steps: int  # policy steps taken
    ground_truth: dict = field(default_factory=dict)  # filled by a monitor that can see it

    @property
    def timeout_label(self) -> str:
        """TIMEOUT(subtask, expert@version), or "" for a trial without a timeout."""
        if self.timed_out_index < 0:
            return ""
        skill = self.skills[self.timed_out_index]
        return f"TIMEOUT({self.timed_out_index}:{skill}, {skill}@v{self.expert_versions[skill]})"


class Router:
    def __init__(
        self, policy: SkillPolicy, config: RouterConfig | None = None, detector_args: dict | None = None
    ) -> None:
        self.policy = policy
        self.config = config or RouterConfig()
        self.detector = DETECTORS[self.config.detector](self.config, **(detector_args or {}))

    def route(self, composition: Composition) -> list[tuple[Subtask, str]]:
        """(subtask, expert skill) per step of the composition; unknown skills are a clear error."""
        known = self.policy.skills()
        unknown = [s.skill for s in composition.subtasks if s.skill not in known]
        if unknown:
            raise UnknownSkillError(
                f"composition {composition.name!r} needs skills {unknown} that have no trained expert; "
                f"known skills: {', '.join(sorted(known)) or '(none)'}"
            )
        return [(s, s.skill) for s in composition.subtasks]

    def run(
        self, env: RobotEnv, composition: Composition, seed: int, monitor: TrialMonitor | None = None
    ) -> TrialResult:
        """Execute the composition from the seeded initial state until success or the first timeout."""
        route = self.route(composition)
        monitor = monitor or TrialMonitor()
        obs = env.reset(composition, seed)
        skills = [skill for _, skill in route]
        versions = {skill: self.policy.version(skill) for skill in skills}
        switches: list[int] = []
        steps, outcome, timed_out = 0, OUTCOME_SUCCESS, -1
        need_done = self.detector.reads_done_probability or monitor.reads_done_probability
        for index, (subtask, skill) in enumerate(route):
            self.policy.reset()
            self.detector.reset(subtask)
            monitor.on_subtask_start(index)
            confirmed = False
            for _ in range(self.config.deadline(skill)):
                action, done_prob = self.policy.act(obs, subtask, composition.robot, need_done)
                obs = env.step(action)
                steps += 1
                monitor.on_step(index, obs, done_prob)
                if self.detector.update(obs, done_prob, action):
                    confirmed = True
                    break
            monitor.on_subtask_end(index, confirmed)
            if not confirmed:
                outcome, timed_out = OUTCOME_TIMEOUT, index
                break
            switches.append(steps)
        return TrialResult(
            composition.name, composition.robot, seed, skills, outcome, timed_out, versions, switches, steps
        )

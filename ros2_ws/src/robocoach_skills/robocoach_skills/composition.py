"""Task compositions: the plain-Python twin of robocoach_msgs/TaskComposition.

A task is an ordered tuple of subtasks; each names a skill (which selects the expert) plus the
object and target it acts on. Experts are defined by skill semantics, so `Subtask("press_button",
"red_button")` and `Subtask("press_button", "green_button")` are served by the same expert.

>>> pick, place = Subtask("pick", "red_cube"), Subtask("place", "red_cube", "bin")
>>> c = Composition("pick_place", "franka", (pick, place))
>>> c.skills
('pick', 'place')
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from robocoach_skills.constants import ROBOTS


class UnknownSkillError(LookupError):
    """A skill no expert serves; the message names the known skills."""


@dataclass(frozen=True)
class Subtask:
    """One step of a composition."""

    skill: str  # selects the expert, e.g. "pick"
    object: str = ""  # scene object acted on, e.g. "red_cube"; "" if none
    target: str = ""  # destination or counterpart, e.g. "bin"; "" if none
    params: tuple[tuple[str, float], ...] = ()  # extra named parameters, SI units

    def __str__(self) -> str:
        args = ", ".join(a for a in (self.object, self.target) if a)
        return f"{self.skill}({args})"

    def to_dict(self) -> dict:
        return {
            "skill": self.skill,
            "object": self.object,
            "target": self.target,
            "params": dict(self.params),
        }

    @classmethod
    def from_dict(cls, d: dict) -> Subtask:
        return cls(
            d["skill"], d.get("object", ""), d.get("target", ""), tuple(sorted(d.get("params", {}).items()))
        )


@dataclass(frozen=True)
class Composition:
    """An ordered list of subtasks for one robot; succeeds when every subtask completes."""

    name: str
    robot: str
    subtasks: tuple[Subtask, ...] = field(default_factory=tuple)
    held_out: bool = False  # True: nothing trains or coaches on it

    def __post_init__(self) -> None:
        if self.robot not in ROBOTS:
            raise ValueError(f"unknown robot {self.robot!r}; known robots: {', '.join(ROBOTS)}")
        if not self.subtasks:
            raise ValueError(f"composition {self.name!r} has no subtasks")

    @property
    def skills(self) -> tuple[str, ...]:
        return tuple(s.skill for s in self.subtasks)

    def up_to(self, index: int) -> Composition:
        """The composition through subtask `index`: a trial of it ends when that subtask does."""
        return replace(self, subtasks=self.subtasks[: index + 1])

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "robot": self.robot,
            "subtasks": [s.to_dict() for s in self.subtasks],
            "held_out": self.held_out,
        }

    @classmethod
    def from_dict(cls, d: dict) -> Composition:
        subtasks = tuple(Subtask.from_dict(s) for s in d["subtasks"])
        return cls(d["name"], d["robot"], subtasks, bool(d.get("held_out", False)))

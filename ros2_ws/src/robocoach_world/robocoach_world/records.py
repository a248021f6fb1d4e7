"""Diagnosed trials, the unit the coach aggregates: plain-Python twin of robocoach_msgs/FailureRecord.

Imagination (CoachWorld + judge) and deployment (the robot or the sim, judged by ground truth or by
the judge) both produce `TrialRecord`s, so the coach scores, plots and compares them the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass

from robocoach_skills.composition import Composition

SOURCE_IMAGINED, SOURCE_DEPLOYED = "imagined", "deployed"


@dataclass(frozen=True)
class TrialRecord:
    composition: str  # Composition.name
    robot: str  # embodiment
    skills: tuple[str, ...]  # the route: expert skill of each subtask
    versions: tuple[int, ...]  # adapter version of each subtask's expert, parallel to skills
    first_failed_index: int  # first subtask that failed (missed its deadline), -1 for a success
    initial_state_id: int  # index of the initial state within the composition's set
    seed: int  # seed that regenerates the initial state
    source: str = SOURCE_IMAGINED  # SOURCE_IMAGINED or SOURCE_DEPLOYED
    valid: bool = True  # False when world-model seeds disagreed: the trial is not counted

    def __post_init__(self) -> None:
        if len(self.skills) != len(self.versions):
            raise ValueError(f"{len(self.skills)} skills but {len(self.versions)} versions")
        if not -1 <= self.first_failed_index < len(self.skills):
            raise ValueError(
                f"first_failed_index {self.first_failed_index} outside the {len(self.skills)} subtasks"
            )
        if self.source not in (SOURCE_IMAGINED, SOURCE_DEPLOYED):
            raise ValueError(
                f"source must be {SOURCE_IMAGINED!r} or {SOURCE_DEPLOYED!r}, got {self.source!r}"
            )

    @classmethod
    def of_route(
        cls,
        composition: Composition,
        versions: Mapping[str, int],
        first_failed_index: int,
        initial_state_id: int,
        seed: int,
        source: str,
        valid: bool = True,
    ) -> TrialRecord:
        """A trial of `composition` routed to its experts at `versions` (skill -> version, 0 if absent)."""
        skills = tuple(s.skill for s in composition.subtasks)
        return cls(
            composition.name,
            composition.robot,
            skills,
            tuple(int(versions.get(s, 0)) for s in skills),
            int(first_failed_index),
            initial_state_id=int(initial_state_id),
            seed=int(seed),
            source=source,
            valid=valid,
        )

    @property
    def success(self) -> bool:
        return self.first_failed_index < 0

    @property
    def failed_pair(self) -> tuple[int, str] | None:
        """(subtask index, expert skill) that failed first, or None for a success."""
        return None if self.success else (self.first_failed_index, self.skills[self.first_failed_index])

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> TrialRecord:
        return cls(**{**values, "skills": tuple(values["skills"]), "versions": tuple(values["versions"])})

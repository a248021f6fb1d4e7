"""Small compositions and trial records with known first failures, for hand-computed diagnoses."""

from __future__ import annotations

from collections.abc import Sequence

from robocoach_skills.composition import Composition, Subtask
from robocoach_world.records import TrialRecord

PICK = Subtask("pick", "red_cube")
PLACE = Subtask("place", "red_cube", "bin")
PRESS_RED = Subtask("press_button", "red_button")
PRESS_GREEN = Subtask("press_button", "green_button")
TASK_A = Composition("task_a", "franka", (PICK, PLACE))
TASK_B = Composition("task_b", "franka", (PRESS_RED, PLACE))
BUTTONS = Composition("buttons", "franka", (PRESS_RED, PRESS_GREEN))


def trials(
    composition: Composition,
    first_failed: Sequence[int],
    states: Sequence[tuple[int, int]] | None = None,
    valid: bool = True,
) -> list[TrialRecord]:
    """One record per first-failed index; states: (initial_state_id, seed) each, default (k, 100 + k)."""
    states = states or [(k, 100 + k) for k in range(len(first_failed))]
    return [
        TrialRecord(
            composition=composition.name,
            robot=composition.robot,
            skills=composition.skills,
            versions=(0,) * len(composition.subtasks),
            first_failed_index=f,
            initial_state_id=state_id,
            seed=seed,
            valid=valid,
        )
        for f, (state_id, seed) in zip(first_failed, states, strict=True)
    ]

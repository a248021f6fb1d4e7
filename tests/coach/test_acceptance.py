"""Where an update is checked, and the verdict on hand-computed progress (coach.acceptance)."""

from __future__ import annotations

import pytest
from coach_helpers import PICK, PLACE, PRESS_RED, TASK_A, TASK_B

from robocoach_skills.composition import Subtask
from robocoach_world.coach.acceptance import AcceptanceConfig, check_sites, judge_update, spread
from robocoach_world.coach.state import RequestState


def _request(composition: str, subtask: Subtask, robot: str = "franka") -> RequestState:
    return RequestState(f"r-{composition}-{subtask}", robot, subtask, composition, 2, (1, 2), "", 1.0, 0)


def test_sites_are_the_requested_subtasks_of_the_skill_once_each_in_request_order():
    requests = [
        _request("task_b", PLACE),
        _request("task_a", PICK),
        _request("task_a", PLACE),
        _request("task_b", PLACE),  # a second request from the same site
        _request("task_a", PLACE, robot="piper"),  # another arm's composition of that name
        _request("elsewhere", PLACE),  # not a composition coached here
        _request("task_b", Subtask("place", "blue_cube", "bin")),  # a subtask task_b does not have
    ]
    assert check_sites([TASK_A, TASK_B], requests, "place") == [(TASK_B, 1), (TASK_A, 1)]
    assert check_sites([TASK_A, TASK_B], requests, "press_button") == []
    assert check_sites([TASK_A, TASK_B], [_request("task_b", PRESS_RED)], "press_button") == [(TASK_B, 0)]


def test_seeds_are_dealt_in_turn_and_a_site_may_get_none():
    assert spread(["a", "b", "c"], [1, 2, 3, 4]) == [[1, 4], [2], [3]]
    assert spread(["a", "b"], [7]) == [[7], []]


@pytest.mark.parametrize(
    ("parent", "new", "tolerance", "accepted", "paired"),
    [
        ([0.5, 0.5], [0.46, 0.46], 0.05, True, 2),  # within tolerance
        ([0.5, 0.5], [0.4, 0.4], 0.05, False, 2),  # 0.1 worse
        ([1.0, None, 0.0], [0.0, 1.0, None], 0.0, False, 1),  # only the first trial reached under both
        ([None, None], [1.0, 1.0], 0.05, True, 0),  # no paired trial: no evidence against it
        ([0.2, 0.2], [0.9, 1.0], 0.0, True, 2),
    ],
)
def test_an_update_is_rejected_only_when_it_deploys_worse_by_more_than_the_tolerance(
    parent, new, tolerance, accepted, paired
):
    verdict = judge_update(parent, new, AcceptanceConfig(trials=len(parent), tolerance=tolerance))
    assert (verdict["accepted"], verdict["paired"], verdict["trials"]) == (accepted, paired, len(parent))


def test_bad_settings_and_unpaired_trials_are_refused():
    with pytest.raises(ValueError, match="trials must be >= 0"):
        AcceptanceConfig(trials=-1)
    with pytest.raises(ValueError, match="tolerance in"):
        AcceptanceConfig(tolerance=1.5)
    with pytest.raises(ValueError, match="pairs them"):
        judge_update([0.5], [0.5, 0.5], AcceptanceConfig())

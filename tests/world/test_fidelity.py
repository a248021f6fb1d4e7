"""One task-policy pair from deployed and imagined trials, worked out by hand (no simulation, no models)."""

from __future__ import annotations

import pytest

from robocoach_skills.tasks import get_composition
from robocoach_world.fidelity import fidelity_markdown, fidelity_measures, pair_row
from robocoach_world.imagine import ImaginedTrial
from robocoach_world.records import TrialRecord

COMPOSITION = get_composition("franka", "press_push")  # two subtasks


def _trial(first_failed: int, seed: int, valid: bool = True) -> ImaginedTrial:
    record = TrialRecord.of_route(COMPOSITION, {}, first_failed, 0, seed, "imagined", valid)
    return ImaginedTrial(record=record, seeds=[], confidence=1.0)


def test_a_pair_counts_valid_imagined_trials_and_pairs_each_with_its_seeds_deployed_trial():
    seeds = [10, 11, 12]
    deployed = [-1, 0, 1]  # a success, a failure at the press, one at the push
    trials = [_trial(-1, 10), _trial(1, 11), _trial(0, 12, valid=False), _trial(0, 12), _trial(-1, 11)]
    row = pair_row(COMPOSITION, seeds, deployed, trials, robot="franka", policy="start")
    assert row["robot"] == "franka" and row["policy"] == "start" and row["composition"] == "press_push"
    assert row["deployed_success"] == pytest.approx(1 / 3)
    assert row["deployed_completion"] == pytest.approx((2 + 0 + 1) / 3 / 2)
    # 4 valid imagined trials: -1, 1, 0, -1 -> success 2/4, completion (2 + 1 + 0 + 2) / 4 / 2
    assert row["imagined_valid"] == 4 and row["imagined_trials"] == 5
    assert row["imagined_success"] == pytest.approx(0.5)
    assert row["imagined_completion"] == pytest.approx(5 / 8)
    assert row["imagined_first_failed"] == [-1, 1, 0, -1]
    assert row["paired_deployed_first_failed"] == [-1, 0, 1, 0]  # seeds 10, 11, 12, 11


def test_a_pair_without_valid_imagined_trials_has_no_imagined_measures():
    row = pair_row(COMPOSITION, [10], [0], [_trial(0, 10, valid=False)])
    assert row["imagined_success"] is None and row["imagined_completion"] is None
    assert row["paired_deployed_first_failed"] == []


def test_a_pair_needs_one_deployed_trial_per_seed():
    with pytest.raises(ValueError, match="2 seeds but 1 deployed trials"):
        pair_row(COMPOSITION, [10, 11], [0], [])


def test_per_skill_counts_each_subtask_completed_where_reached_deployed_and_imagined(tmp_path):
    seeds = [10, 11, 12]
    # press_push: press then push. Deployed: a success, a failed press, a failed push ->
    # press reached 3, completed 2; push reached 2, completed 1.
    # Imagined (valid): -1, -1, 0, 1 -> press reached 4, completed 3; push reached 3, completed 2.
    trials = [_trial(-1, 10), _trial(-1, 11), _trial(0, 12), _trial(1, 10), _trial(1, 11, valid=False)]
    row = pair_row(COMPOSITION, seeds, [-1, 0, 1], trials, robot="franka", policy="start")
    measures = fidelity_measures([row], tmp_path, key=lambda r: r["policy"])
    assert measures["per_skill"] == {
        "franka press_button": {"deployed": [2, 3], "imagined": [3, 4]},
        "franka push": {"deployed": [1, 2], "imagined": [2, 3]},
    }
    assert "| franka push | 1/2 = 50% | 2/3 = 67% |" in fidelity_markdown(measures)

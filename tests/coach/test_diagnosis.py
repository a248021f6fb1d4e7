"""Diagnosis: task-balanced first-timeout masses, reach counts and failure sites, computed by hand."""

from __future__ import annotations

import pytest
from coach_helpers import BUTTONS, PICK, PLACE, PRESS_GREEN, PRESS_RED, TASK_A, TASK_B, trials

from robocoach_skills.composition import Composition
from robocoach_skills.measures import wilson_interval
from robocoach_world.calibration import ImaginationCalibration
from robocoach_world.coach.diagnosis import DiagnosisConfig, Pair, diagnose


def _records():
    """task_a: 4 valid trials failing first at [1, 1, 0, -1] + 1 invalid; task_b: 2 trials at [-1, 1]."""
    a = trials(TASK_A, [1, 1, 0, -1], states=[(3, 103), (3, 103), (5, 105), (6, 106)])
    a += trials(TASK_A, [0], valid=False)  # would add pick mass if it counted
    b = trials(TASK_B, [-1, 1], states=[(0, 200), (1, 201)])
    return a + b


def test_masses_reach_and_success_by_hand():
    d = diagnose(_records(), [TASK_A, TASK_B])
    by_pair = {p.pair: p for p in d.pairs}
    place, pick, press = (
        by_pair[Pair("franka", PLACE)],
        by_pair[Pair("franka", PICK)],
        by_pair[Pair("franka", PRESS_RED)],
    )

    # place: task_a 2/4, task_b 1/2 -> (0.5 + 0.5) / 2; pick: (1/4 + 0) / 2; press: never first fails.
    assert place.mass == pytest.approx(0.5)
    assert pick.mass == pytest.approx(0.125)
    assert press.mass == 0.0
    assert [p.pair for p in d.pairs] == [place.pair, pick.pair, press.pair]  # by mass
    # place is one pair over both tasks: reached by 3 trials of task_a (one failed at pick) + 2 of task_b.
    assert (place.reached, place.first_failures, place.success_rate) == (5, 3, pytest.approx(0.4))
    assert (pick.reached, pick.first_failures, pick.success_rate) == (4, 1, pytest.approx(0.75))
    assert (press.reached, press.success_rate) == (2, 1.0)
    assert pick.pair.expert == "pick" and str(place.pair) == "franka:place(red_cube, bin)"


def test_min_reach_filters_pairs():
    d = diagnose(_records(), [TASK_A, TASK_B])  # min_reach 5
    assert [(str(p.pair), p.eligible) for p in d.pairs] == [
        ("franka:place(red_cube, bin)", True),  # reached 5
        ("franka:pick(red_cube)", False),  # reached 4
        ("franka:press_button(red_button)", False),  # reached 2
    ]
    assert [p.pair.subtask for p in d.eligible()] == [PLACE]
    loose = diagnose(_records(), [TASK_A, TASK_B], DiagnosisConfig(min_reach=4))
    assert [p.pair.subtask for p in loose.eligible()] == [PLACE, PICK]  # press: eligible, but no mass


def test_each_task_weighs_the_same_whatever_its_rollout_count():
    # task_a: 1 failure at pick in 2 trials; task_b: 100 trials, 10 failing at place.
    records = trials(TASK_A, [0, -1]) + trials(TASK_B, [1] * 10 + [-1] * 90)
    by_pair = {p.pair.subtask: p.mass for p in diagnose(records, [TASK_A, TASK_B]).pairs}
    assert by_pair[PICK] == pytest.approx((1 / 2 + 0) / 2)
    assert by_pair[PLACE] == pytest.approx((0 + 10 / 100) / 2)


def test_same_skill_other_object_is_another_pair_of_the_same_expert():
    d = diagnose(trials(BUTTONS, [0, 1, 1, -1]), [BUTTONS])
    by_pair = {p.pair.subtask: p for p in d.pairs}
    assert by_pair[PRESS_RED].mass == pytest.approx(0.25) and by_pair[PRESS_GREEN].mass == pytest.approx(0.5)
    assert by_pair[PRESS_RED].pair.expert == by_pair[PRESS_GREEN].pair.expert == "press_button"


def test_failure_sites_most_frequent_first():
    d = diagnose(_records(), [TASK_A, TASK_B], DiagnosisConfig(top_sites=1))
    place = d.pairs[0]
    assert [
        (s.composition, s.subtask_index, s.initial_state_id, s.seed, s.failures) for s in place.sites
    ] == [("task_a", 1, 3, 103, 2)]
    full = diagnose(_records(), [TASK_A, TASK_B]).pairs[0]
    assert [(s.composition, s.seed, s.failures) for s in full.sites] == [
        ("task_a", 103, 2),
        ("task_b", 201, 1),
    ]


def test_composition_success_with_wilson_interval_and_route():
    d = diagnose(_records(), [TASK_A, TASK_B])
    a, b = d.compositions
    assert (a.composition, a.trials, a.invalid, a.successes, a.success_rate) == ("task_a", 4, 1, 1, 0.25)
    assert a.interval(1.96) == wilson_interval(1, 4)
    assert (b.trials, b.success_rate) == (2, 0.5)
    assert a.route == ("pick(red_cube) -> pick v0", "place(red_cube, bin) -> place v0")
    data = d.to_dict()
    assert data["compositions"][0]["interval"] == wilson_interval(1, 4)
    assert data["pairs"][0]["mass"] == pytest.approx(0.5)


def test_records_that_do_not_fit_their_composition_are_refused():
    with pytest.raises(ValueError, match="unknown composition 'task_b'"):
        diagnose(trials(TASK_B, [0]), [TASK_A])
    wrong = trials(TASK_A, [0])[0]
    with pytest.raises(ValueError, match="routes"):
        diagnose([wrong], [Composition("task_a", "franka", (PICK, PICK, PLACE))])


def test_a_calibration_that_agrees_with_imagination_gives_the_counted_masses():
    agreeing = {f"franka {skill}": {"deployed": [1, 2], "imagined": [1, 2]} for skill in ("pick", "place")}
    counted = diagnose(_records(), [TASK_A, TASK_B])
    calibrated = diagnose(
        _records(), [TASK_A, TASK_B], calibration=ImaginationCalibration(agreeing, pseudo_trials=1e-9)
    )
    assert calibrated.calibrated and not counted.calibrated
    assert [(p.pair, p.reached, p.first_failures, p.sites) for p in calibrated.pairs] == [
        (p.pair, p.reached, p.first_failures, p.sites) for p in counted.pairs
    ]
    assert [p.mass for p in calibrated.pairs] == pytest.approx([p.mass for p in counted.pairs], abs=1e-9)


def test_a_flattered_skill_draws_calibrated_mass_from_the_states_that_reached_it():
    # place completes in all 4 imagined trials; deployed it completes half the time it is reached
    calibration = ImaginationCalibration(
        {"franka place": {"deployed": [5, 10], "imagined": [10, 10]}}, pseudo_trials=1e-9
    )
    records = trials(TASK_A, [0, -1, -1, -1], states=[(0, 100), (1, 101), (1, 101), (2, 102)])
    d = diagnose(records, [TASK_A], DiagnosisConfig(min_reach=1), calibration)
    by_pair = {p.pair.subtask: p for p in d.pairs}
    pick, place = by_pair[PICK], by_pair[PLACE]
    # pick is not calibrated: 3/4 where reached; place 3/3 imagined, scaled by 0.5 / 1.0
    assert pick.mass == pytest.approx(1 / 4) and pick.calibrated_success_rate == pytest.approx(3 / 4)
    assert place.mass == pytest.approx(3 / 4 * 1 / 2)
    assert (place.first_failures, place.success_rate) == (0, 1.0)
    assert place.calibrated_success_rate == pytest.approx(0.5)
    assert [p.pair.subtask for p in d.eligible()] == [PLACE, PICK]
    # it never failed in imagination: its demos start where it was reached, most often first
    assert [(s.initial_state_id, s.seed, s.failures) for s in place.sites] == [(1, 101, 0), (2, 102, 0)]
    assert [(s.initial_state_id, s.failures) for s in pick.sites] == [(0, 1)]
    assert d.to_dict()["calibrated"] and d.to_dict()["pairs"][0]["calibrated_success_rate"] == pytest.approx(
        0.5
    )

"""Task suites and their seeded initial-state distributions."""

from __future__ import annotations

import pytest

from robocoach_skills.composition import Composition, Subtask
from robocoach_skills.constants import ROBOTS
from robocoach_skills.sim.layout import CUBES
from robocoach_skills.skills import skill_names
from robocoach_skills.tasks import (
    HELD_OUT_KIND,
    REGIONS,
    get_composition,
    held_out_compositions,
    initial_region,
    sample_initial_state,
    skill_instances,
    task_suite,
    training_compositions,
)


@pytest.mark.parametrize("robot", ROBOTS)
def test_suite_sizes_and_lengths(robot):
    training, held_out = training_compositions(robot), held_out_compositions(robot)
    assert len(training) >= 8 and len(held_out) == 4
    for comp in task_suite(robot):
        assert comp.robot == robot
        assert 2 <= len(comp.subtasks) <= 4, comp.name
    assert not any(c.held_out for c in training) and all(c.held_out for c in held_out)


@pytest.mark.parametrize("robot", ROBOTS)
def test_held_out_compositions_are_new(robot):
    seen = {c.subtasks for c in training_compositions(robot)}
    for comp in held_out_compositions(robot):
        assert comp.subtasks not in seen, comp.name
    assert sorted(HELD_OUT_KIND.values()) == ["continuation", "cross_task_chain", "reordering", "reordering"]


@pytest.mark.parametrize("robot", ROBOTS)
def test_every_skill_is_trained_on(robot):
    assert set(skill_instances(robot)) == set(skill_names())


def test_get_composition_names_the_known_ones():
    assert get_composition("franka", "pick_place_bin").subtasks[0].skill == "pick"
    with pytest.raises(ValueError, match="pick_place_bin"):
        get_composition("franka", "juggle")


@pytest.mark.parametrize("robot", ROBOTS)
def test_initial_states_are_seeded(robot):
    for comp in task_suite(robot):
        assert sample_initial_state(comp, 4) == sample_initial_state(comp, 4)
        assert sample_initial_state(comp, 4) != sample_initial_state(comp, 5)
    with pytest.raises(ValueError, match="seed"):
        sample_initial_state(task_suite(robot)[0], -1)


@pytest.mark.parametrize("robot", ROBOTS)
def test_distribution_covers_hard_regions_and_keeps_task_cubes(robot):
    for comp in task_suite(robot):
        regions = [initial_region(comp, seed) for seed in range(60)]
        assert set(regions) <= set(REGIONS)
        assert 0.1 < sum(r != "easy" for r in regions) / len(regions) < 0.6, comp.name
        task_cubes = {s.object for s in comp.subtasks if s.object in CUBES}
        for seed in range(10):
            assert task_cubes <= set(sample_initial_state(comp, seed).present)


@pytest.mark.parametrize("robot", ROBOTS)
def test_a_composition_without_cubes_or_buttons_samples_easy_states(robot):
    """Its hard region would be clutter beside a button it does not have (this once raised StopIteration)."""
    drawer = Composition(
        "open_close", robot, (Subtask("open_drawer", "drawer"), Subtask("close_drawer", "drawer"))
    )
    assert {initial_region(drawer, seed) for seed in range(40)} == {"easy"}

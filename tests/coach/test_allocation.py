"""Allocation strategies: exact sums, ranking, the paper's top-M rule and its edge cases."""

from __future__ import annotations

import math

import numpy as np
import pytest

from robocoach_skills.composition import Subtask
from robocoach_world.coach.allocation import (
    ALLOCATORS,
    AllocationConfig,
    InitialStateRef,
    Unresponsive,
    allocate,
    register_allocator,
    unresponsive_experts,
)
from robocoach_world.coach.diagnosis import Diagnosis, DiagnosisConfig, FailureSite, Pair, PairDiagnosis


def _pair(
    skill: str, mass: float, reached: int = 10, seeds=(1,), failures: int = 1, target: str = "red_cube"
) -> PairDiagnosis:
    sites = tuple(FailureSite("task", 0, k, s, failures=len(seeds) - k) for k, s in enumerate(seeds))
    return PairDiagnosis(Pair("franka", Subtask(skill, target)), mass, reached, failures, reached >= 5, sites)


def _diagnosis(*pairs: PairDiagnosis) -> Diagnosis:
    return Diagnosis(tuple(sorted(pairs, key=lambda p: -p.mass)), (), DiagnosisConfig())


def test_top_m_splits_the_budget_over_the_best_two():
    d = _diagnosis(_pair("pick", 0.4), _pair("place", 0.3), _pair("push", 0.2))
    a = allocate(d, 11)
    assert [(d.pair.expert, d.n_demos) for d in a.demos] == [
        ("pick", 6),
        ("place", 5),
    ]  # remainder to the best
    assert a.total == 11 and a.strategy == "top_m"
    assert [(d.pair.expert, d.n_demos) for d in allocate(d, 10, AllocationConfig(top_m=3)).demos] == [
        ("pick", 4),
        ("place", 3),
        ("push", 3),
    ]


def test_top_m_skips_pairs_reached_too_rarely_or_without_mass():
    d = _diagnosis(_pair("pick", 0.9, reached=4), _pair("place", 0.3), _pair("push", 0.0))
    a = allocate(d, 10)
    assert [(d.pair.expert, d.n_demos) for d in a.demos] == [
        ("place", 10)
    ]  # fewer eligible than M: all to it
    assert "1 of 1 eligible" in a.note


def test_no_eligible_pair_means_no_request_and_says_so():
    a = allocate(_diagnosis(_pair("pick", 0.9, reached=2), _pair("place", 0.0)), 10)
    assert a.demos == () and a.total == 0
    assert "no demos requested" in a.note and ">= 5" in a.note
    assert allocate(_diagnosis(_pair("pick", 0.5)), 0).demos == ()


def test_budget_smaller_than_m_drops_empty_allocations():
    a = allocate(_diagnosis(_pair("pick", 0.4), _pair("place", 0.3)), 1)
    assert [(d.pair.expert, d.n_demos) for d in a.demos] == [("pick", 1)]


def test_proportional_by_hand_and_largest_remainder():
    d = _diagnosis(_pair("pick", 0.5), _pair("place", 0.3), _pair("push", 0.2))
    a = allocate(d, 11, AllocationConfig(strategy="proportional"))  # quotas 5.5, 3.3, 2.2
    assert [(d.pair.expert, d.n_demos) for d in a.demos] == [("pick", 6), ("place", 3), ("push", 2)]
    # ties in the remainder go to the better-ranked pair: quotas 1.5, 1.5 -> 2, 1
    assert ALLOCATORS["proportional"]([0.5, 0.5], 3, AllocationConfig()) == [2, 1]


@pytest.mark.parametrize("seed", range(20))
def test_proportional_sums_exactly_and_stays_within_a_demo_of_the_quota(seed):
    rng = np.random.default_rng(seed)
    masses = sorted(rng.uniform(0.01, 1.0, rng.integers(1, 8)), reverse=True)
    budget = int(rng.integers(0, 60))
    counts = ALLOCATORS["proportional"](masses, budget, AllocationConfig())
    assert sum(counts) == budget
    for n, m in zip(counts, masses, strict=True):
        quota = budget * m / sum(masses)
        assert math.floor(quota) <= n <= math.ceil(quota)


def test_initial_states_are_the_failure_sites_cycled():
    a = allocate(_diagnosis(_pair("pick", 0.5, seeds=(7, 8))), 5)
    assert [s.seed for s in a.demos[0].initial_states] == [7, 8, 7, 8, 7]
    assert a.demos[0].initial_states[0] == InitialStateRef("task", 0, 0, 7)


def test_strategies_are_chosen_by_registered_name():
    with pytest.raises(ValueError, match=r"unknown allocation strategy 'greedy'; known: proportional, top_m"):
        AllocationConfig(strategy="greedy")
    with pytest.raises(ValueError, match="already registered"):
        register_allocator("top_m")(ALLOCATORS["top_m"])
    with pytest.raises(ValueError, match="budget"):
        allocate(_diagnosis(_pair("pick", 0.5)), -1)


def test_an_expert_is_unresponsive_when_no_pair_its_last_demos_went_to_gained_enough():
    # success when reached = 1 - failures / reached (10 reached each)
    red, blue, place = "franka:pick(red_cube)", "franka:pick(blue_cube)", "franka:place(red_cube)"
    round0 = _diagnosis(
        _pair("pick", 0.4, failures=8), _pair("pick", 0.3, failures=9, target="blue_cube"),
        _pair("place", 0.2, failures=6),
    )  # fmt: skip
    round1 = _diagnosis(
        _pair("pick", 0.4, failures=7), _pair("pick", 0.1, failures=4, target="blue_cube"),
        _pair("place", 0.2, failures=6),
    )  # fmt: skip
    now = _diagnosis(
        _pair("pick", 0.4, failures=7), _pair("pick", 0.1, failures=3, target="blue_cube"),
        _pair("place", 0.3, failures=6), _pair("push", 0.1),
    )  # fmt: skip
    # pick's last demos (round 1) went to red only: 30% -> 30%, while blue's gain came from round 0's demos
    found = unresponsive_experts([(round0, {red, blue, place}), (round1, {red})], now, min_gain=0.05)
    assert [(u.expert, u.round, [(p, round(a, 6), round(b, 6)) for p, a, b in u.gains]) for u in found] == [
        ("pick", 1, [(red, 0.3, 0.3)]),
        ("place", 0, [(place, 0.4, 0.4)]),
    ]
    assert str(found[0]) == "pick (demos in round 1: franka:pick(red_cube) 30% -> 30%)"
    # one pair of the last demos that gained is enough: round 0's pick demos lifted blue 10% -> 70%
    assert [u.expert for u in unresponsive_experts([(round0, {red, blue})], now, 0.05)] == []
    assert [u.expert for u in unresponsive_experts([(round0, {red})], now, 0.15)] == ["pick"]  # 20% -> 30%
    assert unresponsive_experts([(round0, {red})], now, 0.05) == ()
    assert unresponsive_experts([], now, 0.05) == ()  # no demos yet: nothing to judge


def test_pairs_not_reached_are_not_judged():
    red = "franka:pick(red_cube)"
    then = _diagnosis(_pair("pick", 0.0, reached=0, failures=0), _pair("place", 0.5))
    now = _diagnosis(_pair("pick", 0.5, failures=9), _pair("place", 0.5))
    assert unresponsive_experts([(then, {red})], now, 0.05) == ()
    gone = _diagnosis(_pair("place", 0.5))  # pick's composition had no valid trial this round
    assert unresponsive_experts([(now, {red})], gone, 0.05) == ()


def test_the_pairs_of_unresponsive_experts_are_set_aside_unless_nothing_else_fails():
    d = _diagnosis(
        _pair("pick", 0.4), _pair("pick", 0.35, target="blue_cube"), _pair("place", 0.3), _pair("push", 0.2)
    )
    stalled = Unresponsive("pick", 0, (("franka:pick(red_cube)", 0.1, 0.1),))
    a = allocate(d, 10, AllocationConfig(min_gain=0.05), [stalled])
    assert [(x.pair.expert, x.n_demos) for x in a.demos] == [("place", 5), ("push", 5)]
    assert a.set_aside == (str(stalled),) and a.to_dict()["set_aside"] == [str(stalled)]
    assert "2 of 2 eligible" in a.note and "set aside, no gain after their demos: pick (" in a.note
    only_picks = _diagnosis(_pair("pick", 0.4), _pair("place", 0.0))
    a = allocate(only_picks, 10, AllocationConfig(min_gain=0.05), [stalled])
    assert [(x.pair.expert, x.n_demos) for x in a.demos] == [("pick", 10)]  # the budget is still spent
    assert a.set_aside == () and "none was set aside" in a.note


def test_min_gain_is_a_fraction_or_none():
    assert AllocationConfig().min_gain == 0.05 and AllocationConfig(min_gain=None).min_gain is None
    with pytest.raises(ValueError, match="min_gain"):
        AllocationConfig(min_gain=-0.1)

"""The measures against cases worked out by hand."""

from __future__ import annotations

import math

import pytest

from robocoach_skills.measures import (
    budget_auc,
    failure_f1,
    first_failure_agreement,
    mcnemar_exact,
    mmrv,
    paired_discordance,
    pearson,
    spearman,
    subtask_completion,
    success_rate,
    switch_time_mae,
    wilson_interval,
)


def test_success_rate():
    assert success_rate([True, True, False, False, False]) == 0.4
    with pytest.raises(ValueError, match="zero rollouts"):
        success_rate([])


def test_wilson_interval_by_hand():
    # p = 0.5, n = 10, z = 1.96: centre = (0.5 + 0.19208) / 1.38416 = 0.5
    # half = 1.96 * sqrt(0.025 + 0.009604) / 1.38416 = 0.2634
    low, high = wilson_interval(5, 10)
    half = 1.96 * math.sqrt(0.025 + 1.96**2 / 400) / (1 + 1.96**2 / 10)
    assert (low, high) == pytest.approx((0.5 - half, 0.5 + half))
    assert low == pytest.approx(0.2366, abs=1e-4) and high == pytest.approx(0.7634, abs=1e-4)
    low, high = wilson_interval(0, 20)  # no successes: the interval still has width
    assert low == 0.0 and high == pytest.approx(0.1611, abs=1e-4)
    with pytest.raises(ValueError):
        wilson_interval(3, 2)


def test_correlations_by_hand():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [40, 30, 20, 10]) == pytest.approx(-1.0)
    # ranks x: 1 2 3 4, y: 1 3 2 4 -> d^2 = 0 + 1 + 1 + 0 = 2 -> rho = 1 - 6 * 2 / (4 * 15) = 0.8
    assert spearman([0.1, 0.2, 0.3, 0.4], [0.1, 0.5, 0.3, 0.9]) == pytest.approx(0.8)
    # x = 1 2 3, y = 1 3 2: cov = 0.5 (sample), sd = 1 and 1 -> r = 0.5
    assert pearson([1, 2, 3], [1, 3, 2]) == pytest.approx(0.5)
    assert math.isnan(spearman([1, 1, 1], [1, 2, 3]))


def test_mmrv_by_hand():
    real, sim = [0.9, 0.5, 0.1], [0.2, 0.6, 0.0]
    # pair (0, 1) is ordered wrongly (real 0.9 > 0.5, sim 0.2 < 0.6): gap 0.4; pairs with 2 are right.
    # max per policy: [0.4, 0.4, 0.0] -> mean 0.2667
    assert mmrv(real, sim) == pytest.approx(0.8 / 3)
    assert mmrv(real, real) == 0.0
    assert mmrv([0.0, 1.0], [1.0, 0.0]) == 1.0


def test_budget_auc_by_hand():
    assert budget_auc([0.1, 0.4, 0.6, 0.7]) == pytest.approx((0.1 + 0.8 + 1.2 + 0.7) / 6)
    assert budget_auc([0.5, 0.5]) == 0.5


def test_failure_f1_by_hand():
    predicted = [True, True, False, False, True]
    actual = [True, False, False, True, True]
    # TP = 2, predicted positives 3, actual positives 3 -> precision = recall = 2/3 -> F1 = 2/3
    assert failure_f1(predicted, actual) == pytest.approx(2 / 3)
    assert failure_f1([False, False], [True, False]) == 0.0


def test_switch_time_mae():
    assert switch_time_mae([1.0, 2.5, 4.0], [1.5, 2.5, 3.0]) == pytest.approx(0.5)


def test_mcnemar_exact_by_hand():
    assert mcnemar_exact(0, 5) == pytest.approx(2 / 32)  # 2 * P(X <= 0), X ~ Bin(5, 1/2)
    assert mcnemar_exact(9, 1) == pytest.approx(2 * 11 / 1024)  # 2 * (1 + 10) / 2**10, symmetric
    assert mcnemar_exact(3, 3) == 1.0  # 2 * P(X <= 3) > 1 is capped
    assert mcnemar_exact(0, 0) == 1.0  # no discordant pair: no evidence either way
    with pytest.raises(ValueError, match=">= 0"):
        mcnemar_exact(-1, 2)


def test_paired_discordance_counts_only_disagreements():
    assert paired_discordance([True, True, False, False, True], [True, False, True, True, False]) == (2, 2)
    assert paired_discordance([False, False], [True, False]) == (0, 1)
    with pytest.raises(ValueError, match="equally long"):
        paired_discordance([True], [True, False])


def test_subtask_completion_by_hand():
    # 3 subtasks; trials failed at subtask 0, 2, none, 1: completed 0, 2, 3, 1 of 3 -> 6 / 12
    assert subtask_completion([0, 2, -1, 1], n_subtasks=3) == pytest.approx(0.5)
    assert subtask_completion([-1, -1], n_subtasks=4) == 1.0
    assert subtask_completion([0, 0, 0], n_subtasks=2) == 0.0
    with pytest.raises(ValueError, match=r"-1\.\.1"):
        subtask_completion([2], n_subtasks=2)
    with pytest.raises(ValueError, match=">= 1 trial"):
        subtask_completion([], n_subtasks=2)


def test_first_failure_agreement_by_hand():
    # same initial states: agree on the 1st (both 0), 3rd (both succeeded) and 4th; not the 2nd
    assert first_failure_agreement([0, 1, -1, 2], [0, 0, -1, 2]) == pytest.approx(0.75)
    with pytest.raises(ValueError, match="equally long"):
        first_failure_agreement([0, 1], [0])

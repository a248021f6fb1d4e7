"""The project's measures, defined once: every report, test and benchmark calls these.

>>> success_rate([True, False, True, True])
0.75
>>> round(mmrv(real=[0.9, 0.5, 0.1], sim=[0.2, 0.6, 0.0]), 4)   # the first pair is ranked wrongly
0.2667
>>> round(budget_auc([0.1, 0.4, 0.6, 0.7]), 4)                    # (S0 + 2 S1 + 2 S2 + S3) / 6
0.4667
>>> subtask_completion([-1, 0, 1], n_subtasks=2)                   # (2 + 0 + 1) / 3 trials / 2
0.5
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats


def success_rate(successes: Sequence[bool]) -> float:
    """Fraction of rollouts whose every subtask completed."""
    if len(successes) == 0:
        raise ValueError("success rate of zero rollouts is undefined")
    return float(np.mean(np.asarray(successes, dtype=bool)))


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval of a success rate (z = 1.96: 95%); sound at 0 and n successes too."""
    if n <= 0 or not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n and n > 0, got {successes} of {n}")
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def _pairs(x: Sequence[float], y: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    a, b = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if a.shape != b.shape or a.ndim != 1 or len(a) < 2:
        raise ValueError(
            f"need two equally long sequences of >= 2 values, got shapes {a.shape} and {b.shape}"
        )
    return a, b


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman rank correlation (ties get average ranks); nan when either side is constant."""
    a, b = _pairs(x, y)
    if np.ptp(a) == 0 or np.ptp(b) == 0:
        return math.nan
    return float(stats.spearmanr(a, b).statistic)


def pearson(x: Sequence[float], y: Sequence[float]) -> float:
    """Pearson correlation; nan when either side is constant."""
    a, b = _pairs(x, y)
    if np.ptp(a) == 0 or np.ptp(b) == 0:
        return math.nan
    return float(stats.pearsonr(a, b).statistic)


def mmrv(real: Sequence[float], sim: Sequence[float]) -> float:
    """Mean maximum rank violation (SIMPLER): how badly `sim` mis-orders the pairs `real` orders.

    For each policy i, the largest real-success gap |R_i - R_j| over the j whose order sim gets
    wrong ((S_i < S_j) != (R_i < R_j)); averaged over i. 0 = every pair in the right order.
    """
    r, s = _pairs(real, sim)
    wrong = (s[:, None] < s[None, :]) != (r[:, None] < r[None, :])  # (N, N)
    gaps = np.abs(r[:, None] - r[None, :]) * wrong  # (N, N)
    return float(gaps.max(axis=1).mean())


def subtask_completion(first_failed: Sequence[int], n_subtasks: int) -> float:
    """Mean fraction of a composition's subtasks completed before the first failure (-1: all of them).

    Success rate's graded twin: where every trial fails the whole task, trials still differ in how far
    they got, so imagined and deployed runs can be compared (fidelity) even at 0% success.
    """
    failed = np.asarray(first_failed, dtype=int)
    if len(failed) == 0 or n_subtasks < 1:
        raise ValueError(f"need >= 1 trial and >= 1 subtask, got {len(failed)} and {n_subtasks}")
    if np.any((failed < -1) | (failed >= n_subtasks)):
        raise ValueError(f"first failed indices must lie in -1..{n_subtasks - 1}, got {failed.tolist()}")
    return float(np.mean(np.where(failed < 0, n_subtasks, failed)) / n_subtasks)


def tally_reached(first_failed: Sequence[int], subtasks: Sequence[str], counts: dict[str, list[int]]) -> None:
    """Add trials of one composition to `counts` (subtask label -> [completed, reached]): a trial
    reaches the subtasks up to the one it failed first at (-1: none) and completes those before it.

    Per subtask, completed / reached is how often it succeeds where it is tried, whatever comes before
    it: what a composition-level rate hides.
    """
    for first in first_failed:
        for i, subtask in enumerate(subtasks[: len(subtasks) if first < 0 else first + 1]):
            tally = counts.setdefault(subtask, [0, 0])
            tally[0] += first < 0 or i < first
            tally[1] += 1


def first_failure_agreement(reference: Sequence[int], other: Sequence[int]) -> float:
    """Fraction of paired trials (same initial state) whose first failed subtask is the same (-1 = none)."""
    a, b = (np.asarray(v, dtype=int) for v in (reference, other))
    if a.shape != b.shape or a.ndim != 1 or len(a) == 0:
        raise ValueError(f"need two equally long, non-empty sequences, got shapes {a.shape} and {b.shape}")
    return float(np.mean(a == b))


def budget_auc(success_at_budgets: Sequence[float]) -> float:
    """Area under success vs demo budget, for equally spaced budgets, normalised to [0, 1].

    Trapezoids: for budgets 0/50/100/150 this is (S0 + 2 S1 + 2 S2 + S3) / 6.
    """
    s = np.asarray(success_at_budgets, dtype=float)
    if len(s) < 2:
        raise ValueError(f"need success at >= 2 budgets, got {len(s)}")
    return float((s[:-1] + s[1:]).sum() / (2 * (len(s) - 1)))


def failure_f1(predicted_failure: Sequence[bool], actual_failure: Sequence[bool]) -> float:
    """F1 of a judge's outcome calls with failure as the positive class (1.0 = perfect)."""
    p, a = (np.asarray(v, dtype=bool) for v in _pairs(predicted_failure, actual_failure))
    true_positive = int(np.sum(p & a))
    if true_positive == 0:
        return 0.0
    precision, recall = true_positive / int(p.sum()), true_positive / int(a.sum())
    return 2 * precision * recall / (precision + recall)


def switch_time_mae(detected_s: Sequence[float], actual_s: Sequence[float]) -> float:
    """Mean absolute error of detected subtask boundaries [s], over boundaries both sides have."""
    d, a = _pairs(detected_s, actual_s)
    return float(np.mean(np.abs(d - a)))


def mcnemar_exact(only_a: int, only_b: int) -> float:
    """Two-sided exact McNemar p-value for paired binary outcomes (same initial states, two methods).

    `only_a`: pairs where only method A succeeded; `only_b`: only B. Pairs where both agree carry no
    information. Under H0 the discordant pairs split as Binomial(n, 1/2); p = min(1, 2 P(X <= min)).
    E.g. 0 vs 5 discordant: 2 / 2**5 = 0.0625; 1 vs 9: 2 * 11 / 2**10 = 0.0215; 0 vs 0: 1.
    """
    if only_a < 0 or only_b < 0:
        raise ValueError(f"discordant counts must be >= 0, got {only_a}, {only_b}")
    n = only_a + only_b
    if n == 0:
        return 1.0
    return float(min(1.0, 2.0 * stats.binom.cdf(min(only_a, only_b), n, 0.5)))


def paired_discordance(a: Sequence[bool], b: Sequence[bool]) -> tuple[int, int]:
    """(only A succeeded, only B succeeded) over outcomes paired by initial state."""
    x, y = (np.asarray(v, dtype=bool) for v in (a, b))
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"need two equally long outcome sequences, got shapes {x.shape} and {y.shape}")
    return int(np.sum(x & ~y)), int(np.sum(~x & y))

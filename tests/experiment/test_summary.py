"""The comparison's numbers from hand-made run results: several seeds per method, worked out by hand."""

from __future__ import annotations

import pytest

from robocoach_world.experiment.summary import summarize

T, F = True, False


def _run(method: str, seed: int, training: list[list[bool]], held_out: list[list[bool]]) -> dict:
    """One run: per checkpoint, the outcomes of composition "a" (training) and "h" (held-out)."""
    return {
        "method": method,
        "robot": "franka",
        "seed": seed,
        "demos": 4,
        "demo_frames": 40 + seed,
        "training": ["a"],
        "held_out": ["h"],
        "settings": {"demos_per_round": 2, "budget": 4},
        "checkpoints": [{"outcomes": {"a": a, "h": h}} for a, h in zip(training, held_out, strict=True)],
    }


def test_several_seeds_give_a_mean_a_std_an_auc_each_and_a_test_paired_by_seed_and_state():
    held = [[F], [F], [T]]
    results = [
        _run("robocoach", 0, [[F, F], [T, F], [T, T]], held),
        _run("robocoach", 1, [[F, F], [F, F], [T, F]], held),
        _run("modular_uniform", 0, [[F, F], [F, F], [T, F]], held),
        _run("modular_uniform", 1, [[F, F], [F, F], [F, F]], held),
    ]
    rows = {r["method"]: r for r in summarize(results)["table"]}
    coach = rows["robocoach"]
    assert coach["seeds"] == [0, 1] and coach["budgets"] == [0, 2, 4]
    assert coach["training_success_per_seed"] == [[0, 0.5, 1], [0, 0, 0.5]]
    assert coach["training_success_mean"] == pytest.approx([0, 0.25, 0.75])
    assert coach["training_success_std"] == pytest.approx([0, 0.25, 0.25])
    # (S0 + 2 S1 + S2) / 4 per seed; pooled over both seeds: (0 + 2 x 0.25 + 0.75) / 4
    assert coach["budget_auc_per_seed"] == pytest.approx([0.5, 0.125])
    assert coach["budget_auc"] == pytest.approx(0.3125) and coach["eval_units"] == 4
    assert coach["held_out_success"] == pytest.approx([0, 0, 1])
    # final training outcomes paired by (seed, state): robocoach alone succeeds in 2 of 4, uniform in none
    test = rows["modular_uniform"]["paired_vs_robocoach"]["training"]
    assert (test["pairs"], test["only_robocoach"], test["only_baseline"]) == (4, 2, 0)
    assert test["p_value"] == pytest.approx(0.5)  # exact two-sided: 2 x 0.5^2

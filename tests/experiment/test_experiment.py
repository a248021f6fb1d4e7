"""The reduced profile of `robocoach experiment`, end to end, on a tiny but real prepared run directory.

Every method goes through the coach's loop with its real ports (SimScene, ScriptedSession, CoachWorld
and judge checkpoints, deployed evaluation); the checks are the issue's: every method consumed the same
number of demos and was evaluated from the same initial states, and a finished experiment is read back
rather than redone.
"""

from __future__ import annotations

import json
import time

import pytest
from offboard_models import write_offboard_models

from robocoach_bringup.experiment import PROFILES, ExperimentConfig, run_experiment
from robocoach_world.experiment.methods import METHODS

pytestmark = pytest.mark.slow

ROBOT, TASK = "franka", "press_push"  # its experts serve every composition of the reduced profile
DEADLINE = 4  # steps: an untrained judge never confirms, so every trial ends quickly


@pytest.fixture(scope="module")
def experiment(tmp_path_factory):
    run = tmp_path_factory.mktemp("prepared_run")
    write_offboard_models(run, ROBOT, TASK, DEADLINE)
    config = ExperimentConfig(run=run, output=run / "experiment", profile="reduced", robots=(ROBOT,))
    return config, run_experiment(config)


def test_every_method_spends_the_same_demos_from_the_same_evaluation_states(experiment):
    config, result = experiment
    settings, seeds = PROFILES["reduced"]
    runs = result["runs"]
    assert sorted(r["method"] for r in runs) == sorted(METHODS) and len(runs) == len(METHODS) * seeds
    assert {r["demos"] for r in runs} == {settings.budget}
    rounds = settings.budget // settings.demos_per_round
    for r in runs:
        assert [c["demos"] for c in r["checkpoints"]] == [
            k * settings.demos_per_round for k in range(rounds + 1)
        ]
        assert r["eval_seeds"] == runs[0]["eval_seeds"] and len(r["eval_seeds"]) == settings.eval_rollouts
        for checkpoint in r["checkpoints"]:
            assert set(checkpoint["outcomes"]) == {*settings.training, *settings.held_out}
            assert {len(v) for v in checkpoint["outcomes"].values()} == {settings.eval_rollouts}
    assert (config.output / "report.md").exists() and (config.output / "success_vs_budget.png").exists()
    on_disk = json.loads((config.output / "experiment.json").read_text())
    assert len(on_disk["summary"]["table"]) == len(METHODS)
    reference = next(row for row in on_disk["summary"]["table"] if row["method"] == "robocoach")
    assert "paired_vs_robocoach" not in reference
    assert all("paired_vs_robocoach" in row for row in on_disk["summary"]["table"] if row is not reference)


def test_a_finished_experiment_is_read_back_not_rerun(experiment):
    config, result = experiment
    start = time.perf_counter()
    again = run_experiment(config)
    assert time.perf_counter() - start < 30  # only plots and the report are redone
    assert again["runs"] == json.loads(json.dumps(result["runs"]))  # as result.json holds them

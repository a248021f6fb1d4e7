"""The evaluation stage's fidelity summary on rows worked out by hand (no simulation, no models)."""

from __future__ import annotations

import math

import pytest

from robocoach_bringup.stages.evaluation import _markdown, _plots, _summarize
from robocoach_skills.measures import mmrv


def _row(
    composition: str,
    budget: int,
    deployed: list[int],
    imagined: list[int],
    paired: list[int],
    n: int = 2,
    held_out: bool = False,
) -> dict:
    """A (composition, checkpoint) row; first-failed indices, -1 = success."""
    done = lambda f: sum(n if x < 0 else x for x in f) / len(f) / n  # noqa: E731
    return {
        "robot": "piper",
        "budget": budget,
        "composition": composition,
        "held_out": held_out,
        "deployed_success": sum(x < 0 for x in deployed) / len(deployed),
        "deployed_trials": len(deployed),
        "deployed_first_failed": deployed,
        "deployed_completion": done(deployed),
        "imagined_success": sum(x < 0 for x in imagined) / len(imagined) if imagined else None,
        "imagined_completion": done(imagined) if imagined else None,
        "imagined_valid": len(imagined),
        "imagined_trials": 4,
        "imagined_first_failed": imagined,
        "paired_deployed_first_failed": paired,
    }


def test_fidelity_on_completion_is_defined_where_success_is_constant(tmp_path):
    # Every trial fails the whole task (success constant 0: rank correlations undefined), but the
    # trials got 0, 1 or 1.5 subtasks of 2 far on average: completion ranks the pairs.
    rows = [
        _row("press_push", 0, deployed=[0, 0], imagined=[0, 0], paired=[0, 0]),
        _row("press_push", 2, deployed=[1, 0], imagined=[1, 1], paired=[1, 0]),
        _row("open_then_press", 0, deployed=[1, 1], imagined=[1, 0], paired=[1, 1]),
        _row(
            "open_then_press", 2, deployed=[1, 1], imagined=[], paired=[]
        ),  # no valid imagined trial: left out
        *(_row("push_then_press", b, deployed=[0, 0], imagined=[], paired=[], held_out=True) for b in (0, 2)),
    ]
    plots = _plots(rows, tmp_path)
    success, completion = plots["fidelity"]["success"], plots["fidelity"]["completion"]
    assert success["pairs"] == 3 and math.isnan(success["spearman"]) and math.isnan(success["pearson"])
    # completion: deployed 0, 0.25, 0.5 vs imagined 0, 0.5, 0.25 -> ranks (1, 2, 3) vs (1, 3, 2): rho 0.5
    assert completion["pairs"] == 3 and completion["spearman"] == pytest.approx(0.5)
    assert completion["mmrv"] == pytest.approx(mmrv(real=[0, 0.25, 0.5], sim=[0, 0.5, 0.25]))
    # (deployed, imagined) first failures of the 6 imagined trials: (0,0) (0,0) (1,1) (0,1) (1,1) (1,0)
    assert plots["first_failure_agreement"] == pytest.approx(4 / 6)
    # per skill, [completed, reached]: e.g. the press, deployed 0+1 of 2+2 in press_push, 0 of 2+2 after
    # the drawer; imagined 0+2 of 2+2, 0 of 1
    assert plots["per_skill"] == {
        "piper open_drawer": {"deployed": [4, 4], "imagined": [1, 2]},
        "piper press_button": {"deployed": [1, 8], "imagined": [2, 5]},
        "piper push": {"deployed": [0, 5], "imagined": [0, 2]},
    }
    assert (tmp_path / "imagined_vs_deployed_completion.png").exists()
    text = _markdown(rows, _summarize(rows), plots)
    assert "subtask completion over 3 (composition, checkpoint) pairs: Spearman 0.500" in text
    assert "in 67% of valid imagined trials" in text

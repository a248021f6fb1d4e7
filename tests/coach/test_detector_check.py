"""The detector check: the checked subtask runs to its deadline while every detector only watches, the
subtasks before it switch as deployed, and each detector's switch is scored against the ground truth."""

from __future__ import annotations

import json

import numpy as np
import pytest
from offboard_models import write_offboard_models

from robocoach_skills.composition import Subtask
from robocoach_skills.router import CompletionDetector
from robocoach_world.coach.detector_check import (
    EARLY,
    NEVER,
    ON_TIME,
    DetectorCheckConfig,
    ShadowDetectors,
    classify,
    main,
)

ROBOT, TASK, DEADLINE = "piper", "two_buttons", 6


HOLD = np.zeros(8, dtype=np.float32)  # the action each step sends (these detectors ignore it)


class FiresAt(CompletionDetector):
    """Done from its `step`-th update of a subtask on (0-based)."""

    def __init__(self, step: int) -> None:
        self.at, self.seen = step, 0

    def reset(self, subtask: Subtask) -> None:
        self.seen = 0

    def update(self, obs: dict, done_prob: float, action: np.ndarray) -> bool:
        self.seen += 1
        return self.seen > self.at


def test_earlier_subtasks_switch_and_the_checked_one_only_records_when_each_detector_would():
    rule = ShadowDetectors(FiresAt(1), {"a": FiresAt(2), "b": FiresAt(99)}, checked=1)
    rule.start_trial()
    rule.reset(Subtask("press_button", "red_button"))
    assert [rule.update({}, 0.0, HOLD) for _ in range(2)] == [False, True]  # subtask 0: the switching rule
    rule.reset(Subtask("press_button", "green_button"))
    assert not any(rule.update({}, 0.0, HOLD) for _ in range(5))  # the checked subtask never switches
    assert rule.fired == {"a": 2, "b": -1}
    rule.start_trial()
    rule.reset(Subtask("press_button", "red_button"))
    assert rule.update({}, 0.0, HOLD) is False and rule.index == 0


def test_a_switch_is_on_time_only_where_the_subtask_was_complete():
    complete = [False, False, True, True, False]  # a latch that came undone again
    assert [classify(t, complete) for t in (-1, 1, 2, 4)] == [NEVER, EARLY, ON_TIME, EARLY]


def test_a_check_runs_the_subtask_to_its_deadline_and_scores_both_detectors(tmp_path):
    models = write_offboard_models(tmp_path, ROBOT, TASK, deadline_steps=DEADLINE)
    config = DetectorCheckConfig(
        experts=models["experts"], judge=models["judge"], robot=ROBOT, task=TASK, subtask=0, trials=2,
        done_threshold=0.0, done_patience=3, out=tmp_path / "check",
    )  # fmt: skip
    report = main(config)

    assert report["deadline"] == DEADLINE and len(report["trials"]) == 2
    for trial in report["trials"]:
        assert trial["steps"] == DEADLINE  # watched, never switched
        assert trial["fired"]["done_head"] == 2  # threshold 0: its rule holds from the third step
        assert -1 <= trial["fired"]["judge"] < DEADLINE
        assert len(trial["progress"]) == DEADLINE and all(0 <= p <= 1 for p in trial["progress"])
    summary = report["summary"]
    at_done_head = [t["progress"][2] for t in report["trials"]]  # the step it fired at, in both
    median = summary["done_head"]["median_progress_when_fired"]
    assert median == pytest.approx(sum(at_done_head) / 2, abs=1e-4)
    for name in ("done_head", "judge"):
        assert sum(summary[name][v] for v in (ON_TIME, EARLY, NEVER)) == 2
    written = json.loads((tmp_path / "check" / "detector_check.json").read_text())
    assert written["summary"] == summary
    assert (tmp_path / "check" / "detector_check.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| done_head |" in (tmp_path / "check" / "detector_check.md").read_text()


def test_without_a_judge_only_the_done_head_is_checked_and_plotted(tmp_path):
    """A check without --judge crashed in the plot (one detector, two markers); it must report and plot."""
    models = write_offboard_models(tmp_path, ROBOT, TASK, deadline_steps=DEADLINE)
    config = DetectorCheckConfig(
        experts=models["experts"], robot=ROBOT, task=TASK, subtask=0, trials=1, out=tmp_path / "check"
    )
    report = main(config)
    assert report["detectors"] == ["done_head"] and set(report["trials"][0]["fired"]) == {"done_head"}
    assert (tmp_path / "check" / "detector_check.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

"""The closed-loop check CLI on real (tiny) models: an untrained judge never confirms, so every trial
fails at subtask 0 when its first deadline passes, and the report and strip say so."""

from __future__ import annotations

import json

from offboard_models import write_offboard_models

from robocoach_world.world.closed_loop import ClosedLoopConfig, main

ROBOT, TASK, DEADLINE = "piper", "two_buttons", 6


def test_every_trial_fails_at_the_first_subtask_when_the_judge_never_confirms(tmp_path):
    models = write_offboard_models(tmp_path / "models", ROBOT, TASK, DEADLINE)
    config = ClosedLoopConfig(
        experts=models["experts"], judge=models["judge"], world=models["world"], robot=ROBOT,
        compositions=(TASK,), initial_states=2, rollouts=4, horizon=20, out=tmp_path / "out",
    )  # fmt: skip
    report = main(config)
    line = report["compositions"][TASK]
    assert line["trials"] == 4 and line["n_subtasks"] == 2
    assert line["success"] == 0 and line["past_first_subtask"] == 0 and line["first_failed"] == {0: 4}
    assert json.loads((tmp_path / "out" / "closed_loop.json").read_text()) == json.loads(json.dumps(report))
    assert (tmp_path / "out" / "strip.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

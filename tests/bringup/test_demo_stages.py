"""`robocoach demo --until`: the run stops after the named stage and the report says what did not run."""

from __future__ import annotations

import json

import pytest

from robocoach_bringup.demo import STAGES, DemoConfig, Stage, run_demo


def test_until_stops_after_the_named_stage_and_reports_the_rest(tmp_path):
    ran: list[str] = []

    def recorder(name: str):
        return lambda config, results: ran.append(name) or {}

    stages = tuple(Stage(s.name, s.summary, run=recorder(s.name)) for s in STAGES)
    outcomes = run_demo(DemoConfig(output=tmp_path, robots=("franka",), until="offboard_models"), stages)
    assert ran == ["bootstrap_demos", "bootstrap_experts", "offboard_models"]
    assert [o.status for o in outcomes] == ["done", "done", "done", "not run", "not run"]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["missing_stages"] == []
    assert "| ridi_rounds | not run | 0.0 | --until offboard_models |" in (tmp_path / "report.md").read_text()


def test_an_unknown_until_stage_names_the_stages():
    with pytest.raises(ValueError, match=r"unknown stage 'rounds'.*offboard_models"):
        DemoConfig(until="rounds")

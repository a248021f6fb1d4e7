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


def _stages_into(ran: list[str], fail: str = ""):
    """The real stage list with each stage writing a marker under its `fresh` outputs (or failing)."""

    def stage_fn(name: str, fresh: tuple[str, ...]):
        def run(config, results):
            if name == fail:
                raise RuntimeError(f"{name} killed")
            ran.append(name)
            for out in fresh:
                (config.output / out).mkdir()  # fails if an interrupted attempt's output was left
                (config.output / out / "part").write_text(name)
            return {"seen": sorted(results), "from": name}

        return run

    return tuple(Stage(s.name, s.summary, run=stage_fn(s.name, s.fresh), fresh=s.fresh) for s in STAGES)


def test_a_second_run_into_the_folder_reads_finished_stages_back_and_redoes_the_interrupted_one(tmp_path):
    config = DemoConfig(output=tmp_path, robots=("franka",))
    ran: list[str] = []
    with pytest.raises(RuntimeError, match="bootstrap_experts killed"):
        run_demo(config, _stages_into(ran, fail="bootstrap_experts"))
    (tmp_path / "experts").mkdir()  # what the killed stage left half-written
    assert ran == ["bootstrap_demos"]

    ran.clear()
    outcomes = run_demo(config, _stages_into(ran))
    assert ran == ["bootstrap_experts", "offboard_models", "ridi_rounds", "evaluation"]
    assert outcomes[0].status == "done" and outcomes[0].note.startswith("read back")
    assert outcomes[0].results == {"seen": [], "from": "bootstrap_demos"}
    assert outcomes[1].results["seen"] == ["bootstrap_demos"]  # later stages still get the earlier results
    assert (tmp_path / "experts" / "part").read_text() == "bootstrap_experts"

    ran.clear()
    run_demo(config, _stages_into(ran))
    assert ran == []  # a finished run is only read back
    assert "read back" in (tmp_path / "report.md").read_text()


def test_a_folder_of_another_run_is_refused_not_mixed_into(tmp_path):
    run_demo(DemoConfig(output=tmp_path, robots=("franka",), until="bootstrap_demos"), _stages_into([]))
    with pytest.raises(ValueError, match=r"holds a run with settings .*'seed': 0.*'seed': 1"):
        run_demo(DemoConfig(output=tmp_path, robots=("franka",), seed=1), _stages_into([]))
    older = tmp_path / "older"
    (older / "episodes").mkdir(parents=True)  # a run from before runs resumed: no settings file
    with pytest.raises(ValueError, match=r"without demo_settings\.json"):
        run_demo(DemoConfig(output=older, robots=("franka",)), _stages_into([]))
    (tmp_path / "stages" / "bootstrap_demos.json").write_text("{")  # a record a person broke by hand
    with pytest.raises(ValueError, match="not a stage record"):
        run_demo(DemoConfig(output=tmp_path, robots=("franka",)), _stages_into([]))
    (tmp_path / "demo_settings.json").write_text("{'seed'")  # and a settings file
    with pytest.raises(ValueError, match=r"demo_settings\.json: not a settings file"):
        run_demo(DemoConfig(output=tmp_path, robots=("franka",)), _stages_into([]))

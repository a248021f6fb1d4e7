"""Smoke runs of the `robocoach` command as a user runs it: a subprocess through bin/robocoach."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def robocoach(*args: str, timeout: float = 1800) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(ROOT / "bin" / "robocoach"), *args], capture_output=True, text=True, timeout=timeout
    )


def test_help_lists_subcommands():
    result = robocoach("--help")
    assert result.returncode == 0
    assert all(
        name in result.stdout for name in ("demo", "experiment", "fidelity", "probe", "detector-check")
    )


def test_fidelity_of_an_unfinished_experiment_says_what_to_run_first(tmp_path):
    result = robocoach("fidelity", "--experiments", str(tmp_path))
    assert result.returncode != 0
    said = " ".join((result.stdout + result.stderr).replace("│", " ").split())  # unwrap tyro's box
    assert "has no experiment.json: run `robocoach experiment --output" in said


def test_a_probe_of_a_missing_subtask_names_the_composition_s_subtasks(tmp_path):
    result = robocoach("probe", "--experts", str(tmp_path), "--task", "press_push", "--subtask", "9")
    assert result.returncode != 0
    assert "press_push has 2 subtasks" in result.stdout + result.stderr


def test_unknown_robot_is_a_clear_error(tmp_path):
    result = robocoach("demo", "--robots", "ur5", "--output", str(tmp_path))
    assert result.returncode != 0
    assert "unknown robots" in result.stdout + result.stderr


@pytest.mark.slow
@pytest.mark.timeout(1800)  # several minutes on an idle 2-core machine; more when it is shared
def test_quick_demo_runs_every_stage_through_the_ros_graph(tmp_path):
    """The main job end to end on one arm: bootstrap, offboard models, RIDI rounds over DDS, evaluation."""
    result = robocoach("demo", "--quick", "--robots", "piper", "--output", str(tmp_path))
    assert result.returncode == 0, result.stderr[-4000:]
    report = json.loads((tmp_path / "report.json").read_text())
    stages = {s["name"]: s["status"] for s in report["stages"]}
    assert stages == dict.fromkeys(
        ("bootstrap_demos", "bootstrap_experts", "offboard_models", "ridi_rounds", "evaluation"), "done"
    )
    assert report["missing_stages"] == []
    results = {s["name"]: s["results"] for s in report["stages"]}
    history = results["ridi_rounds"]["history"]["piper"]
    assert [h["round"] for h in history] == [0, 1]  # the quick profile's two rounds, run by the coach node
    assert {r["robot"] for r in results["evaluation"]["rows"]} == {"piper"}
    assert (tmp_path / "report.html").stat().st_size > 0
    report_md = (tmp_path / "report.md").read_text()
    assert "## ridi_rounds" in report_md
    # the last round's operator scorecard, its imagined failure clips linked from the report's folder
    last_round = tmp_path / "coach" / "piper" / f"round_{history[-1]['round']:03d}"
    for clip in json.loads((last_round / "scorecard.json").read_text())["clips"]:
        link = f"coach/piper/{last_round.name}/{clip['path']}"
        assert f"]({link})" in report_md and (tmp_path / link).is_file()
    bootstrap = next(s for s in report["stages"] if s["name"] == "bootstrap_demos")
    assert bootstrap["status"] == "done"
    for skill in bootstrap["results"]["summaries"]["piper"].values():
        assert skill["accepted"] == bootstrap["results"]["demos_per_skill"]
    for plot in bootstrap["results"]["plots"]:
        assert (tmp_path / plot).stat().st_size > 0

    # a second run into the folder reads every stage back; one with other settings is refused
    again = robocoach("demo", "--quick", "--robots", "piper", "--output", str(tmp_path), timeout=300)
    assert again.returncode == 0, again.stderr[-4000:]
    reread = json.loads((tmp_path / "report.json").read_text())["stages"]
    assert all(s["note"].startswith("read back") for s in reread)
    same = [json.dumps([s["results"] for s in run], sort_keys=True) for run in (reread, report["stages"])]
    assert same[0] == same[1]  # as text: NaN (an undefined correlation) is not equal to itself
    other = robocoach("demo", "--quick", "--robots", "piper", "--seed", "1", "--output", str(tmp_path))
    assert other.returncode != 0 and "holds a run with settings" in other.stdout + other.stderr

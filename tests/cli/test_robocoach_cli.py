"""Smoke runs of the `robocoach` command as a user runs it: a subprocess through bin/robocoach."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def robocoach(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(ROOT / "bin" / "robocoach"), *args], capture_output=True, text=True, timeout=timeout
    )


def test_help_lists_subcommands():
    result = robocoach("--help")
    assert result.returncode == 0
    assert "demo" in result.stdout


def test_unknown_robot_is_a_clear_error(tmp_path):
    result = robocoach("demo", "--robots", "ur5", "--output", str(tmp_path))
    assert result.returncode != 0
    assert "unknown robots" in result.stdout + result.stderr


@pytest.mark.slow
def test_demo_report_names_every_stage(tmp_path):
    result = robocoach("demo", "--quick", "--robots", "piper", "--output", str(tmp_path))
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    stages = {s["name"]: s["status"] for s in report["stages"]}
    assert set(stages) >= {"bootstrap_demos", "bootstrap_experts", "ridi_rounds", "evaluation"}
    assert set(report["missing_stages"]) == {name for name, status in stages.items() if status == "missing"}
    markdown = (tmp_path / "report.md").read_text()
    for name in report["missing_stages"]:
        assert name in markdown
    assert all(status in ("done", "missing") for status in stages.values())
    bootstrap = next(s for s in report["stages"] if s["name"] == "bootstrap_demos")
    assert bootstrap["status"] == "done"
    for skill in bootstrap["results"]["summaries"]["piper"].values():
        assert skill["accepted"] == bootstrap["results"]["demos_per_skill"]
    for plot in bootstrap["results"]["plots"]:
        assert (tmp_path / plot).stat().st_size > 0

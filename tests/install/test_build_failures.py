"""A broken interface package makes the workspace build fail loudly and leaves no install space behind;
a file removed from a package does not break the next build."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MSGS = ROOT / "ros2_ws" / "src" / "robocoach_msgs"
BRINGUP = ROOT / "ros2_ws" / "src" / "robocoach_bringup"


def _clean_env() -> dict:
    """The environment of a fresh shell: no overlay of the project workspace."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AMENT_", "COLCON_", "CMAKE_PREFIX"))}
    env["ROBOCOACH_VENV"] = str(ROOT / ".venv")
    return env


def test_malformed_interface_fails_the_build(tmp_path):
    package = tmp_path / "ws" / "src" / "robocoach_msgs"
    shutil.copytree(MSGS, package)
    (package / "msg" / "Subtask.msg").write_text("string skill\nnot_a_type[ broken\n")
    (tmp_path / "ws" / "install").mkdir()  # a stale install space from an earlier build must not survive

    result = subprocess.run(
        ["bash", str(ROOT / "scripts" / "build_ws.sh"), str(tmp_path / "ws")],
        capture_output=True, text=True, env=_clean_env(), timeout=300,
    )  # fmt: skip

    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "Subtask" in output and "colcon build failed" in output  # colcon's error is shown
    assert not (tmp_path / "ws" / "install").exists()


def test_a_removed_launch_file_does_not_break_the_next_build(tmp_path):
    """--symlink-install leaves a dangling link to a removed file, which setup.py's data_files glob
    would pick up: the next build prunes it (a renamed launch file once broke every built workspace)."""
    package = tmp_path / "ws" / "src" / "robocoach_bringup"
    shutil.copytree(BRINGUP, package, ignore=shutil.ignore_patterns("__pycache__"))
    removed = package / "launch" / "removed.launch.py"
    removed.write_text('"""About to be removed."""\n')

    def build() -> subprocess.CompletedProcess:
        return subprocess.run(
            ["bash", str(ROOT / "scripts" / "build_ws.sh"), str(tmp_path / "ws")],
            capture_output=True, text=True, env=_clean_env(), timeout=300,
        )  # fmt: skip

    assert build().returncode == 0
    removed.unlink()
    result = build()
    assert result.returncode == 0, result.stdout + result.stderr
    share = tmp_path / "ws" / "install" / "robocoach_bringup" / "share" / "robocoach_bringup" / "launch"
    assert sorted(p.name for p in share.iterdir()) == sorted(p.name for p in (package / "launch").iterdir())

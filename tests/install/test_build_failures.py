"""A broken interface package makes the workspace build fail loudly and leaves no install space behind."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MSGS = ROOT / "ros2_ws" / "src" / "robocoach_msgs"


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

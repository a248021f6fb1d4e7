"""Every worked example in a docstring (`>>>`) of the project's Python packages runs and holds."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "ros2_ws" / "src"
PACKAGES = ("robocoach_skills", "robocoach_world", "robocoach_bringup")


def _modules_with_examples() -> list[str]:
    modules = []
    for package in PACKAGES:
        for path in sorted((SRC / package / package).rglob("*.py")):
            if ">>> " in path.read_text():
                relative = path.relative_to(SRC / package).with_suffix("")
                modules.append(".".join(relative.parts))
    return modules


@pytest.mark.parametrize("module", _modules_with_examples())
def test_docstring_examples(module):
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0

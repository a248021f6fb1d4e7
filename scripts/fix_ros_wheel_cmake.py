"""Point the ROS 2 wheels' exported CMake targets at this interpreter's include directories.

The `ros-kilted-*` wheels are built in a manylinux image and their `*Export.cmake` files keep that
image's absolute paths (`/opt/python/cp311-cp311/include/python3.11` and the numpy include under
its site-packages). CMake refuses imported targets with non-existent include paths, so building any
interface package against the wheels fails until those paths name this venv's Python and numpy.
Idempotent: a second run finds nothing to rewrite.

    python scripts/fix_ros_wheel_cmake.py .venv
"""

from __future__ import annotations

import re
import sys
import sysconfig
from pathlib import Path

import numpy

BUILD_PYTHON_INCLUDE = re.compile(r"/opt/python/cp3\d+-cp3\d+/include/python3\.\d+")
BUILD_NUMPY_INCLUDE = re.compile(
    r"/opt/python/cp3\d+-cp3\d+/lib/python3\.\d+/site-packages/numpy/(?:_core|core)/include"
)


def fix_prefix(prefix: Path) -> int:
    """Rewrite every exported CMake file under `prefix/share`; return how many files changed."""
    python_include = sysconfig.get_paths()["include"]
    numpy_include = numpy.get_include()
    changed = 0
    for cmake_file in (prefix / "share").glob("*/cmake/*.cmake"):
        text = cmake_file.read_text()
        fixed = BUILD_NUMPY_INCLUDE.sub(numpy_include, text)
        fixed = BUILD_PYTHON_INCLUDE.sub(python_include, fixed)
        if fixed != text:
            cmake_file.write_text(fixed)
            changed += 1
    return changed


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: fix_ros_wheel_cmake.py VENV_PREFIX")
    print(f"fix_ros_wheel_cmake: rewrote {fix_prefix(Path(sys.argv[1]))} CMake export files")

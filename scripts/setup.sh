#!/usr/bin/env bash
# From nothing to a working RoboCoach environment, in one command:
#   1. checks the system tools the build needs (names the Debian package when one is missing),
#   2. creates .venv (git-ignored) and installs the pinned requirements/ into it,
#   3. colcon-builds ros2_ws (scripts/build_ws.sh).
# Idempotent: each step keeps a stamp (a hash of its inputs) and is skipped while its inputs are
# unchanged, so a second run downloads nothing. Afterwards `source env.sh` (or use bin/robocoach).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV="$ROOT/.venv"
PYTHON=${ROBOCOACH_PYTHON:-python3.11}
DEPS_STAMP="$VENV/.robocoach-deps-stamp"

say() { printf '[setup] %s\n' "$*"; }
die() { printf '[setup] ERROR: %s\n' "$*" >&2; exit 1; }

need() {  # need COMMAND DEBIAN_PACKAGE
  command -v "$1" >/dev/null 2>&1 || die "'$1' not found. Install it with: sudo apt-get install $2"
}
need cmake cmake
need gcc gcc
need g++ g++
need make make
need git git
need "$PYTHON" "python3.11 python3.11-venv python3.11-dev (or set ROBOCOACH_PYTHON)"
"$PYTHON" -c 'import venv, ensurepip' 2>/dev/null \
  || die "$PYTHON cannot create virtual environments. Install: sudo apt-get install python3.11-venv"
"$PYTHON" -c 'import sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
  || die "Python headers missing. Install: sudo apt-get install python3.11-dev"
if ! ldconfig -p 2>/dev/null | grep -q 'libEGL.so.1'; then
  say "warning: libEGL not found; offscreen MuJoCo rendering needs: sudo apt-get install libegl1 libegl-mesa0 libgl1-mesa-dri"
fi

if [ ! -x "$VENV/bin/python" ]; then
  say "creating $VENV"
  "$PYTHON" -m venv "$VENV"
fi

deps_hash=$(cat "$ROOT"/requirements/*.txt "$ROOT/scripts/fix_ros_wheel_cmake.py" | sha256sum | cut -d' ' -f1)
if [ "$(cat "$DEPS_STAMP" 2>/dev/null)" != "$deps_hash" ]; then
  say "installing pinned requirements into .venv (first run: a few minutes)"
  "$VENV/bin/python" -m pip install --disable-pip-version-check -q -r "$ROOT/requirements/all.txt"
  "$VENV/bin/python" "$ROOT/scripts/fix_ros_wheel_cmake.py" "$VENV"
  echo "$deps_hash" > "$DEPS_STAMP"
else
  say "requirements unchanged, skipping pip"
fi

bash "$ROOT/scripts/setup_franka_sim.sh"
bash "$ROOT/scripts/build_ws.sh" "$ROOT/ros2_ws"
say "done in ${SECONDS} s. In a new shell: source $ROOT/env.sh   (or run $ROOT/bin/robocoach --help)"

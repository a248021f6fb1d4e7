#!/usr/bin/env bash
# franka-sim (a server speaking the libfranka network protocol, ports 1337/1338) in a venv of its own:
# it pins numpy==1.26.4 and mujoco<3.3, which the main .venv cannot share. The libfranka backend's tests
# start it with the FR3 model this project ships ($FR3_MJCF), so nothing is downloaded at run time.
# Idempotent: skipped while this script (and so its pins) is unchanged (a stamp holds its hash).
#   scripts/setup_franka_sim.sh            -> .venv/franka-sim (inside the git-ignored .venv)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${ROBOCOACH_FRANKA_SIM_VENV:-$ROOT/.venv/franka-sim}
PYTHON=${ROBOCOACH_PYTHON:-python3.11}
STAMP="$VENV/.robocoach-franka-sim-stamp"
# franka-sim and everything it pulls, pinned (resolved on Python 3.11 / x86_64).
PINS=(
  franka-sim==1.1.7 numpy==1.26.4 mujoco==3.2.7 trimesh==5.2.0 robot_descriptions==3.3.0
  absl-py==2.5.1 etils==1.15.0 fsspec==2026.9.0 glfw==2.11.0 GitPython==3.2.1 gitdb==4.0.12
  smmap==5.0.3 PyOpenGL==3.1.10 tqdm==4.70.1 typing_extensions==4.16.0 zipp==4.1.2
)

say() { printf '[setup] %s\n' "$*"; }

stamp_hash=$(sha256sum "${BASH_SOURCE[0]}" | cut -d' ' -f1)
if [ "$(cat "$STAMP" 2>/dev/null)" = "$stamp_hash" ]; then
  say "franka-sim unchanged, skipping"
  exit 0
fi
[ -x "$VENV/bin/python" ] || { say "creating $VENV"; "$PYTHON" -m venv "$VENV"; }
say "installing ${PINS[0]} into $VENV"
"$VENV/bin/python" -m pip install --disable-pip-version-check -q "${PINS[@]}"
"$VENV/bin/python" -c 'import franka_sim.run_server'
echo "$stamp_hash" > "$STAMP"

#!/usr/bin/env bash
# colcon-build a workspace against .venv. Skipped when the sources are unchanged since the last good build.
# A failed build shows colcon's error, removes the install space (so nothing imports a half-built
# workspace) and exits non-zero.
#   scripts/build_ws.sh [WORKSPACE]     (default: ros2_ws)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WS=$(cd "${1:-$ROOT/ros2_ws}" && pwd)
VENV=${ROBOCOACH_VENV:-$ROOT/.venv}
STAMP="$WS/install/.robocoach-build-stamp"

say() { printf '[build] %s\n' "$*"; }

[ -x "$VENV/bin/colcon" ] || { echo "[build] ERROR: $VENV has no colcon; run scripts/setup.sh" >&2; exit 1; }
# With --symlink-install, edits to Python modules are live without a rebuild; what needs one is any
# other file (interfaces, package.xml, setup.py/cfg, data files) and any file added or removed.
src_hash=$(cd "$WS" && {
  find src -type f ! -path '*/__pycache__/*' ! -name '*.pyc' | sort
  find src -type f \( ! -name '*.py' -o -name setup.py \) ! -path '*/__pycache__/*' ! -name '*.pyc' -print0 \
    | sort -z | xargs -0 sha256sum
} | sha256sum | cut -d' ' -f1)
if [ "$(cat "$STAMP" 2>/dev/null)" = "$src_hash" ]; then
  say "workspace sources unchanged, skipping colcon build"
  exit 0
fi

say "colcon build in $WS"
rm -f "$STAMP"
export VIRTUAL_ENV="$VENV" PATH="$VENV/bin:$PATH"
export CMAKE_PREFIX_PATH="$VENV" AMENT_PREFIX_PATH="$VENV"
cd "$WS"
# A source file removed since the last build leaves a dangling symlink behind (--symlink-install), which
# setup.py's data_files globs pick up and fail on ("can't copy ... launch/x.launch.py"): prune those.
for dir in build install; do
  if [ -d "$dir" ]; then find "$dir" -xtype l -delete; fi
done
if ! colcon build --symlink-install --event-handlers console_cohesion- status- \
      --cmake-args -DPython3_EXECUTABLE="$VENV/bin/python" -DBUILD_TESTING=OFF; then
  echo "[build] ERROR: colcon build failed (errors above; full logs in $WS/log/latest_build)." >&2
  echo "[build] Removing $WS/install so nothing imports a half-built workspace." >&2
  rm -rf "$WS/install"
  exit 1
fi
echo "$src_hash" > "$STAMP"
say "workspace built"

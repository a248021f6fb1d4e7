# Source this file to use RoboCoach in a shell:   source env.sh
# It activates .venv, overlays the colcon-built workspace, puts bin/ on PATH, and sets the
# defaults every RoboCoach process shares (offscreen rendering, DDS on this host only).
_robocoach_root=$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")" && pwd)
if [ ! -f "$_robocoach_root/ros2_ws/install/.robocoach-build-stamp" ]; then
  echo "robocoach: the workspace is not built; run $_robocoach_root/scripts/setup.sh first" >&2
  return 1 2>/dev/null || exit 1
fi
# shellcheck disable=SC1091
. "$_robocoach_root/.venv/bin/activate"
# colcon's setup scripts read unset variables; source them without nounset.
case $- in *u*) _robocoach_nounset=1; set +u;; *) _robocoach_nounset=0;; esac
# shellcheck disable=SC1091
. "$_robocoach_root/ros2_ws/install/setup.bash"
[ "$_robocoach_nounset" = 1 ] && set -u
export ROBOCOACH_ROOT="$_robocoach_root"
export PATH="$_robocoach_root/bin:$PATH"
export MUJOCO_GL="${MUJOCO_GL:-egl}"
export RMW_IMPLEMENTATION="${RMW_IMPLEMENTATION:-rmw_fastrtps_cpp}"
export ROS_AUTOMATIC_DISCOVERY_RANGE="${ROS_AUTOMATIC_DISCOVERY_RANGE:-LOCALHOST}"
unset _robocoach_root _robocoach_nounset

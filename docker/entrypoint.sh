#!/usr/bin/env bash
# Source ROS 2, an optional robot driver workspace (franka_ros2 / piper_ros) and RoboCoach, then run the command.
set -e
. /opt/ros/jazzy/setup.bash
if [ -f /opt/robot_ws/install/setup.bash ]; then . /opt/robot_ws/install/setup.bash; fi
. /robocoach/ros2_ws/install/setup.bash
exec "$@"

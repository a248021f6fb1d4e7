"""`ros2 launch robocoach_bringup sim.launch.py robot:=franka|piper`: the embedded default, MuJoCo robot."""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration

from robocoach_bringup.launch_description import robocoach_launch


def _include(context):
    robot = LaunchConfiguration("robot").perform(context)
    return list(robocoach_launch(robot, backend="sim").entities)


def generate_launch_description():
    return LaunchDescription(
        [
            DeclareLaunchArgument("robot", default_value="franka", description="franka or piper"),
            OpaqueFunction(function=_include),
        ]
    )

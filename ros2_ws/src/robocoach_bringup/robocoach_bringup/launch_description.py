"""The body of the launch files (launch/*.launch.py): `graph.describe_graph` as launch_ros Nodes.

`launch` and `launch_ros` exist on robot workstations (any ROS 2 desktop install), not on the
PyPI-built machines the tests run on; the graph itself is tested there through `graph.py`.
"""

from __future__ import annotations

from pathlib import Path

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from robocoach_bringup.graph import GraphConfig, describe_graph


def _nodes(context, robot: str):
    backend = LaunchConfiguration("backend").perform(context)
    run_dir = Path(LaunchConfiguration("run_dir").perform(context))
    machine = LaunchConfiguration("machine").perform(context)
    specs = describe_graph(GraphConfig(robot=robot, backend=backend, run_dir=run_dir))
    return [
        Node(
            package=s.package,
            executable=s.executable,
            name=s.name,
            parameters=[s.parameters],
            output="screen",
        )
        for s in specs
        if machine in ("all", s.machine)
    ]


def robocoach_launch(robot: str, backend: str) -> LaunchDescription:
    return LaunchDescription(
        [
            DeclareLaunchArgument("backend", default_value=backend, description="sim or hardware"),
            DeclareLaunchArgument(
                "run_dir", default_value="runs/demo", description="experts, episodes, models"
            ),
            DeclareLaunchArgument(
                "machine", default_value="all", description="all, robot (workstation) or offboard (GPU box)"
            ),
            OpaqueFunction(function=_nodes, args=[robot]),
        ]
    )

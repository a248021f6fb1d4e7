"""The body of the launch files (launch/*.launch.py): `graph.describe_graph` as launch_ros Nodes.

Every launch file is one call of `robocoach_launch`; what it fixes (the arm, the machine) is no launch
argument, the rest are, so the four files differ in defaults only and start the graph the CLI starts.
`launch` and `launch_ros` exist on robot workstations (any ROS 2 desktop install), not on the
PyPI-built machines the tests run on; the graph itself is tested there through `graph.py`.
"""

from __future__ import annotations

from pathlib import Path

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from robocoach_bringup.graph import BACKENDS, MACHINES, GraphConfig, describe_graph
from robocoach_skills.constants import ROBOTS


def _nodes(context, robot: str | None, machine: str | None) -> list[Node]:
    def argument(name: str) -> str:
        return LaunchConfiguration(name).perform(context)

    config = GraphConfig(
        robot=robot or argument("robot"),
        backend=argument("backend"),
        run_dir=Path(argument("run_dir")),
        machine=machine or argument("machine"),
    )
    return [
        Node(
            package=s.package,
            executable=s.executable,
            name=s.name,
            parameters=[s.parameters],
            output="screen",
        )
        for s in describe_graph(config)
    ]


def robocoach_launch(
    robot: str | None = None, backend: str = "hardware", machine: str | None = None
) -> LaunchDescription:
    """The graph of `robot` (None: a `robot` launch argument) on `machine` (None: a `machine` launch
    argument, default all); `backend` is the default of the `backend` launch argument."""
    arguments = [
        DeclareLaunchArgument("backend", default_value=backend, choices=list(BACKENDS)),
        DeclareLaunchArgument("run_dir", default_value="runs/demo", description="experts, episodes, models"),
    ]
    if robot is None:
        arguments.append(DeclareLaunchArgument("robot", default_value=ROBOTS[0], choices=list(ROBOTS)))
    if machine is None:
        arguments.append(
            DeclareLaunchArgument(
                "machine",
                default_value="all",
                choices=list(MACHINES),
                description="all, robot (workstation) or offboard (GPU box)",
            )
        )
    return LaunchDescription([*arguments, OpaqueFunction(function=_nodes, args=[robot, machine])])

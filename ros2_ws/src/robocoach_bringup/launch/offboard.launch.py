"""`ros2 launch robocoach_bringup offboard.launch.py [robot:=piper] [backend:=sim] [run_dir:=D]`: the GPU
box's side of an arm's graph (world_model, progress_judge, coach), franka's unless robot says otherwise."""

from robocoach_bringup.graph import OFFBOARD_MACHINE
from robocoach_bringup.launch_description import robocoach_launch


def generate_launch_description():
    return robocoach_launch(machine=OFFBOARD_MACHINE)

"""`ros2 launch robocoach_bringup sim.launch.py [robot:=piper] [machine:=robot|offboard] [run_dir:=D]`:
the embedded default, a MuJoCo robot."""

from robocoach_bringup.launch_description import robocoach_launch


def generate_launch_description():
    return robocoach_launch(backend="sim")

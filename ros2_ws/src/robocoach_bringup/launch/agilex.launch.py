"""`ros2 launch robocoach_bringup agilex.launch.py [backend:=sim] [machine:=robot|offboard] [run_dir:=D]`:
the AgileX PiPER (robot "piper") on hardware."""

from robocoach_bringup.launch_description import robocoach_launch


def generate_launch_description():
    return robocoach_launch("piper")

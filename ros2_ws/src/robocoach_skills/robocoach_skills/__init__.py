"""Robot side of RoboCoach: embedded MuJoCo robot, skills, tasks, experts, router, backends.

Everything here except the `nodes` subpackage is plain Python + numpy/torch/MuJoCo and never
imports rclpy, so the nodes, the CLI and the tests share the same functions.
"""

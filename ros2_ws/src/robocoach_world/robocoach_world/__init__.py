"""Offboard side of RoboCoach: CoachWorld, the progress judge and the RIDI coach.

Learning code here never imports rclpy; nodes are thin adapters in the `nodes` subpackage.
"""

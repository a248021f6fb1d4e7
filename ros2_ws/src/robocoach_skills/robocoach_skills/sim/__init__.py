"""The embedded default robot: MuJoCo scene of a Franka-like or PiPER-like arm on a table.

Modules: `arms` (published kinematics and limits, joint-command checks), `layout` (fixtures, per-arm
workspaces, initial states), `mjcf` (the scene XML built from those), `scene` (the stepped
simulation and its ground truth), `ik` (damped least-squares inverse kinematics), `geometry`
(obstacle footprints and clear paths for scripted motions). Plain Python + numpy + MuJoCo; never
imports rclpy.
"""

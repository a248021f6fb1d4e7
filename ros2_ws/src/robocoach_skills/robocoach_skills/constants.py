"""Stable string keys shared by every RoboCoach component: one place for each name.

Observation keys name the entries of an observation dict (and the episode-store arrays), topic
names are the ROS graph's contract, and robot names are the embodiments the suite supports.
"""

from __future__ import annotations

# Embodiments. The order is fixed: it defines the one-hot embodiment id models receive.
ROBOTS: tuple[str, ...] = ("franka", "piper")

# Observation / episode keys (only what a real robot provides, plus privileged ground truth).
OBS_IMAGE = "image"  # (H, W, 3) uint8 RGB camera frame
OBS_PROPRIO = "proprio"  # (n_joints + 1,) float32 joint positions [rad] + gripper opening [0..1]
OBS_PRIVILEGED = "privileged"  # dict of ground-truth scene state; never given to learners

# Topic, service and action names of the ROS graph.
TOPIC_JOINT_STATES = "/robocoach/robot/joint_states"
TOPIC_CAMERA = "/robocoach/robot/camera/image_raw"
TOPIC_JOINT_COMMAND = "/robocoach/robot/joint_command"
TOPIC_DEMO_REQUESTS = "/robocoach/operator/demo_requests"
TOPIC_DEMO_EPISODES = "/robocoach/operator/demo_episodes"
TOPIC_COACH_ROUND = "/robocoach/coach/round"
TOPIC_IMAGINED_FRAMES = "/robocoach/world/imagined/image"

# Frame ids.
FRAME_WORLD = "world"
FRAME_CAMERA = "camera_optical"

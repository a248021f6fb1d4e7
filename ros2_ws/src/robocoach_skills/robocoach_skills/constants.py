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

# Training-sample / batch keys (the episode dataset yields them, experts and judges consume them).
KEY_ACTION_CHUNK = "action_chunk"  # (K, ACTION_DIM) padded future actions: joint targets + gripper
KEY_ACTION_MASK = "action_mask"  # (K,) True where the chunk step lies inside the episode
KEY_CHANNEL_MASK = "channel_mask"  # (ACTION_DIM,) True on the robot's real channels
KEY_PROGRESS = "progress"  # () ground-truth progress of the active subtask, 0..1
KEY_SUBTASK_INDEX = "subtask_index"  # () index of the active subtask
KEY_DONE = "done"  # () 1.0 where the active subtask completes
KEY_EPISODE_ID = "episode_id"  # () store index of the episode
KEY_FRAME_INDEX = "frame_index"  # () step within the episode
KEY_ROBOT_ID = "robot_id"  # () index into ROBOTS
KEY_SKILL = "skill"  # skill name of the active subtask (batched: list of names or long indices)
KEY_ARGUMENTS = "arguments"  # (2,) long: SUBTASK_ARGUMENTS ids of the active subtask's object and target

# Scene names a subtask's object/target may take, known to the experts (index 0: none). One press
# expert serves "press red_button" and "press green_button": the argument tells it which.
SUBTASK_ARGUMENTS: tuple[str, ...] = (
    "",
    "red_cube",
    "green_cube",
    "blue_cube",
    "red_button",
    "green_button",
    "drawer",
    "bin",
    "pad",
)

# Topic, service and action names of the ROS graph.
TOPIC_JOINT_STATES = "/robocoach/robot/joint_states"
TOPIC_CAMERA = "/robocoach/robot/camera/image_raw"
TOPIC_JOINT_COMMAND = "/robocoach/robot/joint_command"
SERVICE_RESET_SCENE = "/robocoach/robot/reset_scene"
ACTION_EXECUTE_TASK = "/robocoach/skills/execute_task"
SERVICE_LOAD_ADAPTER = "/robocoach/skills/load_adapter"
SERVICE_GET_EXPERTS = "/robocoach/skills/get_experts"

# JointState name of the gripper channel; its position is the opening fraction 0 (closed) .. 1 (open).
GRIPPER_JOINT = "gripper"

# Frame ids.
FRAME_CAMERA = "camera_optical"

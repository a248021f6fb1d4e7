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
KEY_SUBTASK_START = "subtask_start_image"  # (3, H, W) the frame the active subtask started from, in [0, 1]
# (2C,) its keypoints as the experts see them (ChunkPolicy.start_keypoints): computed once per subtask
KEY_SUBTASK_START_KEYPOINTS = "subtask_start_keypoints"
# (3C,) a frame's keypoints and pooled features (Backbone.vision, concatenated) in place of the frame:
# computed once per frame while an update keeps the vision fixed (train.update_adapter's dense steps)
KEY_VISION = "vision"

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

# Keypoint channel k of the experts' backbone is trained to find LANDMARKS[k] (experts/perception.py),
# and the landmark each subtask argument names is how an expert finds *its* object among the others.
LANDMARKS: tuple[str, ...] = (
    "red_cube",
    "green_cube",
    "blue_cube",
    "red_button",
    "green_button",
    "bin",
    "pad",
    "drawer_handle",
    "gripper",
)
ARGUMENT_LANDMARKS: dict[str, str] = {
    **{a: a for a in SUBTASK_ARGUMENTS if a in LANDMARKS},
    "": "gripper",  # no argument: the gripper itself, so its offsets from the gripper are zero
    "drawer": "drawer_handle",
}

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

# Operator station: the coach's demo requests, the answers, and the recorder's operator interface.
TOPIC_DEMO_REQUESTS = "/robocoach/operator/demo_requests"  # robocoach_msgs/DemoRequest
TOPIC_DEMO_EPISODES = "/robocoach/operator/demo_episodes"  # robocoach_msgs/DemoEpisode (incl. rejections)
TOPIC_PENDING_REQUESTS = "/robocoach/operator/pending_requests"  # std_msgs/String, latched, for the operator
TOPIC_DEMO_COMMAND = "/robocoach/operator/demo_command"  # std_msgs/String: end | accept | discard | ...
ACTION_COLLECT_DEMO = "/robocoach/operator/collect_demo"  # robocoach_msgs/CollectDemo

# Teleoperation sources of the demo recorder.
TOPIC_TELEOP_KEYS = "/robocoach/teleop/keys"  # std_msgs/String, one key per message
TOPIC_TELEOP_LEADER = "/robocoach/teleop/leader_joint_states"  # sensor_msgs/JointState of a leader arm
TOPIC_TELEOP_TWIST = "/robocoach/teleop/twist"  # geometry_msgs/Twist (spacemouse)

# Visualisation (rviz).
TOPIC_IMAGINED_IMAGE = "/robocoach/world/imagined_image"  # sensor_msgs/Image, imagined rollout frames
TOPIC_TASK_MARKERS = "/robocoach/viz/task_markers"  # visualization_msgs/MarkerArray
FRAME_WORLD = "world"  # fixed frame of the markers and the rviz view
TOPIC_COACH_ROUNDS = "/robocoach/coach/rounds"  # robocoach_msgs/CoachRound, one per finished RIDI round
TOPIC_COACH_SCORECARD = "/robocoach/coach/scorecard"  # std_msgs/String (markdown), for the demo station

# Offboard side: CoachWorld imagination, and the copy of the experts it imagines with.
ACTION_IMAGINE = "/robocoach/world/imagine"  # robocoach_msgs/Imagine
SERVICE_WORLD_LOAD_ADAPTER = "/robocoach/world/load_adapter"  # LoadAdapter for the world model's experts
SERVICE_JUDGE_ROLLOUT = "/robocoach/world/judge_rollout"  # robocoach_msgs/JudgeRollout

"""Export an episode as a rosbag2 MCAP bag, for Foxglove, `ros2 bag play` and the rest of the ROS tooling.

Pure Python through `rosbags` (no ROS install, no rclpy). One message per step on each topic, all
stamped `start_ns + round(t * 1e9 / fps)` (bag receive time and header stamp alike):

    /robocoach/robot/camera/image_raw    sensor_msgs/msg/Image       rgb8, frame_id "camera_optical"
    /robocoach/robot/joint_states        sensor_msgs/msg/JointState  position = proprio[t]
    /robocoach/robot/joint_command       sensor_msgs/msg/JointState  position = actions[t]

Joint names come from `episode.metadata["joint_names"]` when present, else "joint_0", "joint_1"...
(the last entry of proprio/actions is the gripper). Message definitions come from the Jazzy
typestore; Image and JointState hash the same (RIHS01) in Humble, Jazzy and Kilted.

    export_mcap(store.get("episode_000007"), Path("/tmp/episode_000007"))
    read_mcap(Path("/tmp/episode_000007")).images.shape  # (120, 96, 96, 3)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from rosbags.rosbag2 import Reader, StoragePlugin, Writer
from rosbags.typesys import Stores, get_typestore

from robocoach_skills.constants import FRAME_CAMERA, TOPIC_CAMERA, TOPIC_JOINT_COMMAND, TOPIC_JOINT_STATES
from robocoach_skills.data.episode import Episode

TYPESTORE = get_typestore(Stores.ROS2_JAZZY)
IMAGE_TYPE = "sensor_msgs/msg/Image"
JOINT_STATE_TYPE = "sensor_msgs/msg/JointState"
IMAGE_ENCODING = "rgb8"

_Time = TYPESTORE.types["builtin_interfaces/msg/Time"]
_Header = TYPESTORE.types["std_msgs/msg/Header"]
_Image = TYPESTORE.types[IMAGE_TYPE]
_JointState = TYPESTORE.types[JOINT_STATE_TYPE]


@dataclass(frozen=True)
class BagEpisode:
    """The arrays read back from an exported bag, in step order."""

    stamps_ns: np.ndarray  # (T,) int64 header stamps of the camera frames, ns
    images: np.ndarray  # (T, H, W, 3) uint8 RGB
    proprio: np.ndarray  # (T, D) float32, from joint_states positions
    actions: np.ndarray  # (T, D) float32, from joint_command positions
    joint_names: tuple[str, ...]  # names of the D joint_states entries


def joint_names(episode: Episode) -> tuple[str, ...]:
    """Names for the D proprio/action entries: metadata["joint_names"] if given, else joint_<i>."""
    dof = episode.proprio.shape[1]
    names = tuple(episode.metadata.get("joint_names", (f"joint_{i}" for i in range(dof))))
    if len(names) != dof:
        raise ValueError(f"metadata joint_names has {len(names)} names for {dof} proprio entries: {names}")
    return names


def export_mcap(episode: Episode, path: Path, *, start_ns: int = 0) -> Path:
    """Write `episode` to a new rosbag2 directory `path` (MCAP storage) and return `path`."""
    names = list(joint_names(episode))
    no_values = np.zeros(0, dtype=np.float64)
    height, width = episode.images.shape[1:3]
    with Writer(path, version=Writer.VERSION_LATEST, storage_plugin=StoragePlugin.MCAP) as writer:
        camera, states, command = (
            writer.add_connection(topic, msgtype, typestore=TYPESTORE)
            for topic, msgtype in (
                (TOPIC_CAMERA, IMAGE_TYPE),
                (TOPIC_JOINT_STATES, JOINT_STATE_TYPE),
                (TOPIC_JOINT_COMMAND, JOINT_STATE_TYPE),
            )
        )
        for t in range(len(episode)):
            stamp_ns = start_ns + round(t * 1e9 / episode.fps)
            stamp = _Time(sec=stamp_ns // 1_000_000_000, nanosec=stamp_ns % 1_000_000_000)
            image = _Image(
                header=_Header(stamp=stamp, frame_id=FRAME_CAMERA),
                height=height,
                width=width,
                encoding=IMAGE_ENCODING,
                is_bigendian=0,
                step=width * 3,
                data=np.ascontiguousarray(episode.images[t]).reshape(-1),
            )
            joints = (
                _JointState(
                    header=_Header(stamp=stamp, frame_id=""),
                    name=names,
                    position=values.astype(np.float64),
                    velocity=no_values,
                    effort=no_values,
                )
                for values in (episode.proprio[t], episode.actions[t])
            )
            for connection, message in zip((camera, states, command), (image, *joints), strict=True):
                writer.write(connection, stamp_ns, TYPESTORE.serialize_cdr(message, connection.msgtype))
    return path


def read_mcap(path: Path) -> BagEpisode:
    """Read a bag written by `export_mcap` back into arrays (the round-trip check, and a reference reader)."""
    messages: dict[str, list] = {TOPIC_CAMERA: [], TOPIC_JOINT_STATES: [], TOPIC_JOINT_COMMAND: []}
    with Reader(path) as reader:
        wanted = [c for c in reader.connections if c.topic in messages]
        for connection, _, raw in reader.messages(connections=wanted):
            messages[connection.topic].append(TYPESTORE.deserialize_cdr(raw, connection.msgtype))
    missing = [topic for topic, msgs in messages.items() if not msgs]
    if missing:
        raise ValueError(f"{path}: no messages on {missing}; not a bag written by export_mcap?")
    frames = messages[TOPIC_CAMERA]
    for msg in frames:
        if msg.encoding != IMAGE_ENCODING:
            raise ValueError(f"{path}: image encoding {msg.encoding!r}, expected {IMAGE_ENCODING!r}")
    return BagEpisode(
        stamps_ns=np.array([m.header.stamp.sec * 1_000_000_000 + m.header.stamp.nanosec for m in frames]),
        images=np.stack([m.data.reshape(m.height, m.width, 3) for m in frames]),
        proprio=np.stack([m.position for m in messages[TOPIC_JOINT_STATES]]).astype(np.float32),
        actions=np.stack([m.position for m in messages[TOPIC_JOINT_COMMAND]]).astype(np.float32),
        joint_names=tuple(messages[TOPIC_JOINT_STATES][0].name),
    )

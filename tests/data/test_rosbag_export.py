"""MCAP export: an episode survives export_mcap -> read_mcap, and the bag is a plain rosbag2 MCAP bag."""

from __future__ import annotations

import numpy as np
import pytest
from episode_factory import make_episode
from rosbags.rosbag2 import Reader

from robocoach_skills.constants import TOPIC_CAMERA, TOPIC_JOINT_COMMAND, TOPIC_JOINT_STATES
from robocoach_skills.data.rosbag_export import export_mcap, read_mcap

STEPS = 12


def test_export_round_trip(tmp_path):
    names = [f"fr3_joint{i}" for i in range(1, 8)] + ["fr3_finger"]
    episode = make_episode(steps=STEPS, fps=15.0, metadata={"joint_names": names})
    bag = export_mcap(episode, tmp_path / "bag", start_ns=1_700_000_000_000_000_000)

    back = read_mcap(bag)
    assert np.array_equal(back.images, episode.images) and back.images.dtype == np.uint8
    assert np.array_equal(back.proprio, episode.proprio) and back.proprio.dtype == np.float32
    assert np.array_equal(back.actions, episode.actions)
    assert back.joint_names == tuple(names)
    expected_stamps = 1_700_000_000_000_000_000 + np.round(np.arange(STEPS) * 1e9 / 15.0).astype(np.int64)
    assert np.array_equal(back.stamps_ns, expected_stamps)


def test_bag_is_mcap_with_three_topics(tmp_path):
    bag = export_mcap(make_episode(steps=STEPS, robot="piper"), tmp_path / "bag")

    assert [p.suffix for p in bag.iterdir() if p.name != "metadata.yaml"] == [".mcap"]
    with Reader(bag) as reader:
        topics = {name: (info.msgtype, info.msgcount) for name, info in reader.topics.items()}
        assert reader.duration == round((STEPS - 1) * 1e9 / 10.0) + 1  # rosbags counts the end inclusively
    assert topics == {
        TOPIC_CAMERA: ("sensor_msgs/msg/Image", STEPS),
        TOPIC_JOINT_STATES: ("sensor_msgs/msg/JointState", STEPS),
        TOPIC_JOINT_COMMAND: ("sensor_msgs/msg/JointState", STEPS),
    }
    assert read_mcap(bag).joint_names == tuple(f"joint_{i}" for i in range(7))


def test_joint_names_must_match_the_joint_count(tmp_path):
    with pytest.raises(ValueError, match="2 names for 8"):
        export_mcap(make_episode(metadata={"joint_names": ["a", "b"]}), tmp_path / "bag")

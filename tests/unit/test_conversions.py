"""Message <-> library conversions: images keep every pixel, compositions keep every field."""

from __future__ import annotations

import numpy as np
import pytest
from sensor_msgs.msg import Image

from robocoach_skills.composition import Composition, Subtask
from robocoach_skills.nodes.conversions import (
    composition_to_msg,
    image_to_msg,
    msg_to_composition,
    msg_to_image,
)


def test_image_roundtrip_is_exact():
    image = np.random.default_rng(0).integers(0, 256, (5, 7, 3), dtype=np.uint8)
    assert np.array_equal(msg_to_image(image_to_msg(image)), image)


def test_bgr8_with_row_padding_is_read_as_rgb():
    rgb = np.random.default_rng(1).integers(0, 256, (3, 4, 3), dtype=np.uint8)
    step = 4 * 3 + 4  # 4 padding bytes per row
    rows = np.zeros((3, step), dtype=np.uint8)
    rows[:, : 4 * 3] = rgb[..., ::-1].reshape(3, 12)
    msg = Image(height=3, width=4, encoding="bgr8", step=step, data=rows.tobytes())
    assert np.array_equal(msg_to_image(msg), rgb)


@pytest.mark.parametrize(
    ("msg", "error"),
    [
        (Image(height=2, width=2, encoding="mono8", step=2, data=bytes(4)), "unsupported image encoding"),
        (Image(height=2, width=2, encoding="rgb8", step=6, data=bytes(5)), "image buffer too small"),
    ],
)
def test_malformed_images_are_refused(msg, error):
    with pytest.raises(ValueError, match=error):
        msg_to_image(msg)


def test_composition_roundtrip():
    composition = Composition(
        "drawer_chain",
        "piper",
        (Subtask("open_drawer", "drawer"), Subtask("place", "red_cube", "drawer", (("height", 0.05),))),
        held_out=True,
    )
    assert msg_to_composition(composition_to_msg(composition)) == composition


def test_malformed_composition_messages_are_refused():
    msg = composition_to_msg(Composition("c", "franka", (Subtask("pick", "red_cube"),)))
    msg.robot = "ur5"
    with pytest.raises(ValueError, match="unknown robot 'ur5'"):
        msg_to_composition(msg)
    msg.robot = "franka"
    msg.subtasks[0].parameter_names = ["speed"]
    with pytest.raises(ValueError, match="1 parameter names but 0 values"):
        msg_to_composition(msg)

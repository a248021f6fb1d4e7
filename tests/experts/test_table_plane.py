"""The table-plane argument inputs: keypoints cast onto the table through each robot's camera."""

from __future__ import annotations

from dataclasses import replace

import mujoco
import numpy as np
import pytest
import torch

from robocoach_skills.camera import TablePlane
from robocoach_skills.constants import LANDMARKS, ROBOTS, SUBTASK_ARGUMENTS
from robocoach_skills.experts import ExpertConfig
from robocoach_skills.experts.model import ExpertLibrary, backbone_feature_size
from robocoach_skills.sim.layout import get_layout
from robocoach_skills.sim.scene import SceneConfig, SimScene
from robocoach_skills.tasks import get_composition

IMAGE_SIZE = 64


def _projected(robot: str, points: np.ndarray) -> np.ndarray:
    """World points (N, 3) -> where MuJoCo's camera of `robot` images them, normalised to [-1, 1]."""
    scene = SimScene(SceneConfig(robot=robot, image_size=IMAGE_SIZE))
    mujoco.mj_forward(scene.model, scene.data)  # camera poses
    return scene.project(points) / IMAGE_SIZE * 2.0 - 1.0


@pytest.mark.parametrize("robot", ROBOTS)
@pytest.mark.parametrize("landmark", ["red_cube", "green_button", "bin", "drawer_handle"])
def test_table_plane_inverts_the_simulated_camera_at_each_landmark_s_height(robot, landmark):
    height = get_layout(robot).landmark_height(landmark)
    xs, ys = np.meshgrid(np.linspace(0.1, 0.7, 4), np.linspace(-0.35, 0.35, 4))
    world = np.stack([xs.ravel(), ys.ravel(), np.full(xs.size, height)], axis=1)
    image = torch.tensor(_projected(robot, world), dtype=torch.float32)[None]
    landmarks = torch.full((1, len(world)), LANDMARKS.index(landmark))
    table = TablePlane()(image, torch.tensor([ROBOTS.index(robot)]), landmarks)
    np.testing.assert_allclose(table[0].numpy(), world[:, :2], atol=1e-5)


def test_landmark_heights_are_where_the_scene_puts_them():
    scene = SimScene(SceneConfig(robot="franka", image_size=IMAGE_SIZE))
    scene.reset(get_composition("franka", "pick_place_bin"), 0)
    state, layout = scene.privileged_state(), get_layout("franka")
    resting = {
        "red_button": state["buttons"]["red_button"]["top_pos"],
        "drawer_handle": state["drawer"]["handle_pos"],
        "red_cube": state["objects"]["red_cube"]["pos"],
    }
    for landmark, position in resting.items():
        assert layout.landmark_height(landmark) == pytest.approx(position[2], abs=2e-3), landmark
    with pytest.raises(ValueError, match="gripper"):
        layout.landmark_height("gripper")


def test_table_inputs_are_where_the_object_is_from_the_hand(config):
    """A cube keypoint where the camera sees a cube at (0.45, 0.05) on the table, the hand at (0.30,
    -0.10): the table inputs say (0.15, 0.15) m from the hand, in table units, now and remembered; the
    pick's target (none: the gripper) is the hand itself, whatever its keypoint says."""
    config = replace(config, image_size=IMAGE_SIZE, argument_table=True, argument_memory=True)
    backbone = ExpertLibrary(config, skills=("pick",)).backbone
    cells = backbone_feature_size(IMAGE_SIZE, config.conv_strides)
    cube = np.array([[0.45, 0.05, get_layout("franka").dims.cube_half]])
    keypoint = _projected("franka", cube)[0] * cells / (cells - 1)  # image edges -> cell centres
    c = len(LANDMARKS)
    now = torch.zeros(1, 2 * c)
    index = LANDMARKS.index("red_cube")
    now[0, index], now[0, c + index] = float(keypoint[0]), float(keypoint[1])
    gripper = LANDMARKS.index("gripper")
    now[0, gripper], now[0, c + gripper] = -0.7, 0.4  # somewhere else in the image, high above the table
    arguments = torch.tensor([[SUBTASK_ARGUMENTS.index("red_cube"), 0]])
    hand_xy = torch.tensor([[0.30, -0.10]])
    offsets = backbone.argument_offsets(now, arguments, now, torch.tensor([0]), hand_xy)[0]
    assert offsets.shape == (config.argument_dim,)
    from_hand = torch.tensor([0.15, 0.15]) / config.table_unit
    table = offsets[-8:].view(2, 2, 2)  # (now, first frame) x (object, target) x (x, y)
    assert torch.allclose(table[:, 0], from_hand.expand(2, 2), atol=1e-4)
    assert torch.equal(table[:, 1], torch.zeros(2, 2))
    with pytest.raises(ValueError, match="hand xy"):
        backbone.argument_offsets(now, arguments, now)


def test_table_inputs_widen_the_argument_keypoints_by_four_per_frame():
    base = ExpertConfig(argument_table=False)
    assert ExpertConfig(argument_table=True).argument_dim == base.argument_dim + 8
    assert ExpertConfig(argument_table=True, argument_memory=False).argument_dim == (
        ExpertConfig(argument_table=False, argument_memory=False).argument_dim + 4
    )

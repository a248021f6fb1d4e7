"""The perception prior: landmark targets land on the right pixels, and training moves only vision."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch
from expert_helpers import clone_state, cpu_state, synthetic_batch

from robocoach_skills.constants import OBS_IMAGE, SUBTASK_ARGUMENTS
from robocoach_skills.experts import ExpertLibrary, pretrain
from robocoach_skills.experts.config import ExpertConfig
from robocoach_skills.experts.model import SpatialSoftArgmax, backbone_feature_size
from robocoach_skills.experts.perception import (
    LANDMARKS,
    PerceptionConfig,
    heatmap_loss,
    keypoint_coordinates,
    landmark_loss,
    landmark_points,
    pretrain_vision,
    render_landmark_frames,
)
from robocoach_skills.sim.layout import CUBES, OBJECT_RGBA
from robocoach_skills.sim.scene import SceneConfig, SimScene
from robocoach_skills.tasks import get_composition


@pytest.mark.parametrize("robot", ["franka", "piper"])
def test_projected_cubes_land_on_their_colour(robot):
    scene = SimScene(SceneConfig(robot=robot, image_size=64))
    try:
        for seed in range(3):
            image = scene.reset(get_composition(robot, "pick_place_bin"), seed)["image"]
            cube = scene.privileged_state()["objects"]["red_cube"]["pos"]
            col, row = scene.project(cube[None])[0].astype(int)
            r, g, b = image[row, col].astype(int)
            assert r > g + 60 and r > b + 60, (
                f"seed {seed}: pixel {(col, row)} is {(r, g, b)}, not the red cube"
            )
    finally:
        scene.close()
    assert OBJECT_RGBA["red_cube"][0] > 0.8  # the check above relies on the cube being red


def test_keypoint_frame_spans_feature_cell_centres():
    # 64 px, 8 cells of 8 px: cell 0's centre (pixel 4) is -1, cell 7's (pixel 60) is +1.
    coords = keypoint_coordinates(np.array([[4.0, 60.0], [32.0, 32.0]]), image_size=64, feature_size=8)
    np.testing.assert_allclose(coords, [[-1.0, 1.0], [0.0, 0.0]], atol=1e-6)
    assert backbone_feature_size(64, (2, 2, 2)) == 8 and backbone_feature_size(33, (2, 2)) == 9
    assert backbone_feature_size(64, ExpertConfig().conv_strides) == 16  # the last conv keeps its map


def test_heatmap_loss_pulls_each_keypoint_onto_its_landmark_between_cells():
    target = torch.tensor([[[0.3, -0.55], [-1.0, 1.0]]])  # 2 landmarks, the second on a corner cell
    both, neither = torch.tensor([[True, True]]), torch.tensor([[False, False]])
    logits = torch.zeros(1, 3, 16, requires_grad=True)  # 3 channels of a 4 x 4 map; the third is no landmark
    optimizer = torch.optim.Adam([logits], lr=0.1)
    for _ in range(400):
        loss = heatmap_loss(logits, target, both, feature_size=4)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        keypoints = SpatialSoftArgmax()(logits.view(1, 3, 4, 4))  # temperature 1: the logits as they are
    found = torch.stack([keypoints[0, :2], keypoints[0, 3:5]], dim=-1)
    np.testing.assert_allclose(found.numpy(), target[0].numpy(), atol=0.03)
    assert torch.equal(logits.detach()[0, 2], torch.zeros(16))  # channels past the landmarks are free
    assert heatmap_loss(logits, target, neither, feature_size=4).item() == 0.0


def test_rendered_frames_are_seeded_and_parked_cubes_invisible():
    config = PerceptionConfig(frames=6, poses_per_state=3, seed=4)
    data = render_landmark_frames("piper", config, image_size=32, progress=False)
    again = render_landmark_frames("piper", config, image_size=32, progress=False)
    assert data.images.shape == (6, 32, 32, 3) and data.pixels.shape == (6, len(LANDMARKS), 2)
    np.testing.assert_array_equal(data.images, again.images)
    assert data.visible[:, LANDMARKS.index("bin")].all()  # fixtures stay in the frame
    scene = SimScene(SceneConfig(robot="piper", render=False))
    for seed in range(20):  # two_buttons has no task cube; each distractor is present with p = 0.6
        scene.reset(get_composition("piper", "two_buttons"), seed)
        state = scene.privileged_state()
        _, present = landmark_points(state)
        assert list(present[: len(CUBES)]) == [state["objects"][c]["present"] for c in CUBES]
        if not present[: len(CUBES)].all():
            return
    pytest.fail("no seed of 20 parked a cube")


def test_landmark_loss_ignores_invisible_landmarks():
    keypoints = torch.zeros(1, 2 * 16)  # 16 channels, all at the centre
    target = torch.tensor([[[0.5, 0.5], [0.9, -0.9]]])
    assert landmark_loss(keypoints, target, torch.tensor([[True, False]])).item() == pytest.approx(0.25)


def test_vision_pretraining_learns_and_moves_only_vision(config):
    lib = ExpertLibrary(config, skills=("pick",))
    data = render_landmark_frames("piper", PerceptionConfig(frames=32, seed=1), config.image_size, False)
    before = clone_state(lib)
    metrics, losses = pretrain_vision(lib.backbone, [data], PerceptionConfig(steps=80, batch_size=16), False)
    assert metrics["vision/landmark_loss_last"] < 0.5 * metrics["vision/landmark_loss_first"], metrics
    assert np.mean(losses[-10:]) < np.mean(losses[:5])
    assert metrics["vision/rmse_px_last"] > 0 and 0 <= metrics["vision/lamp_accuracy_last"] <= 1
    assert set(np.unique(data.lamps)) == {0.0, 1.0}  # both lamp states are rendered
    after = cpu_state(lib.state_dict())
    vision = {id(p) for p in lib.backbone.vision_parameters()}
    names = {n for n, p in lib.named_parameters() if id(p) in vision}
    for name, tensor in before.items():
        assert torch.equal(tensor, after[name]) != (name in names), f"{name} changed: {name in names}"


def test_pretrain_leaves_frozen_parameters_bit_identical(config):
    lib = ExpertLibrary(config, skills=("pick", "place"))
    batch = synthetic_batch(config, ("franka", "piper") * 4, skills=("pick", "place") * 4)
    frozen = lib.backbone.vision_parameters()
    before = [p.detach().clone() for p in frozen]
    fuse = lib.backbone.fuse.weight.detach().clone()
    pretrain(lib, [batch], steps=5, progress=False, frozen=frozen)
    assert all(torch.equal(b, p) for b, p in zip(before, frozen, strict=True))
    assert not torch.equal(fuse, lib.backbone.fuse.weight)


def test_frozen_vision_includes_every_skills_conv_lora(config):
    """Bootstrap pretraining freezes the skills' conv LoRAs with the vision layers: they stay the
    identity, so every skill sees what the perception prior taught, until its first update."""
    lib = ExpertLibrary(replace(config, lora_layers=None), skills=("pick", "place"))
    conv_lora = lib.vision_adapter_parameters()
    assert len(conv_lora) == 2 * 2 * len(config.conv_channels)  # A and B per conv, per skill
    batch = synthetic_batch(lib.config, ("franka", "piper") * 4, skills=("pick", "place") * 4)
    dense_before = lib.adapter("pick").layers["fuse"].B.detach().clone()
    pretrain(lib, [batch], steps=5, progress=False, frozen=[*lib.backbone.vision_parameters(), *conv_lora])
    assert not torch.equal(dense_before, lib.adapter("pick").layers["fuse"].B)
    with torch.no_grad():
        plain = lib.backbone.vision(batch[OBS_IMAGE])[0]
        for skill in ("pick", "place"):
            assert torch.equal(plain, lib.backbone.vision(batch[OBS_IMAGE], lib.adapter(skill))[0])


def test_each_argument_selects_its_own_landmark_keypoint(config):
    config = replace(config, argument_table=False)  # the image-plane inputs (test_table_plane.py: the rest)
    backbone = ExpertLibrary(config, skills=("pick",)).backbone
    channels = config.conv_channels[-1]
    keypoints = torch.arange(2.0 * channels)[None]  # channel k at (k, channels + k)
    arguments = torch.tensor([[SUBTASK_ARGUMENTS.index("green_cube"), SUBTASK_ARGUMENTS.index("pad")]])
    gripper = LANDMARKS.index("gripper")
    cube, pad = LANDMARKS.index("green_cube"), LANDMARKS.index("pad")
    expected = [cube, channels + cube, pad, channels + pad]  # object xy, target xy
    expected += [cube - gripper, cube - gripper, pad - gripper, pad - gripper]  # minus the gripper's
    offsets = backbone.argument_offsets(keypoints, arguments, keypoints)[0]
    assert offsets[:8].tolist() == expected
    direction = math.copysign(math.sqrt(0.5), pad - cube)  # target minus object, the same in x and y
    assert offsets[8:10].tolist() == pytest.approx([direction, direction])
    assert offsets[10:].tolist() == expected[4:]  # nothing moved since the first frame
    nothing, drawer = SUBTASK_ARGUMENTS.index(""), SUBTASK_ARGUMENTS.index("drawer")
    offsets = backbone.argument_offsets(keypoints, torch.tensor([[drawer, nothing]]), keypoints)[0]
    handle = LANDMARKS.index("drawer_handle")
    assert offsets[:4].tolist() == [handle, channels + handle, gripper, channels + gripper]
    assert offsets[6:8].tolist() == [0.0, 0.0]  # no target: the gripper, zero offset


def test_landmark_order_matches_the_scene_points():
    scene = SimScene(SceneConfig(robot="piper", image_size=32))
    try:
        scene.reset(get_composition("piper", "pick_place_bin"), 0)
        points, _ = landmark_points(scene.privileged_state())
    finally:
        scene.close()
    assert LANDMARKS[: len(CUBES)] == CUBES and len(points) == len(LANDMARKS)
    np.testing.assert_allclose(points[LANDMARKS.index("gripper")], scene.privileged_state()["ee_pos"])

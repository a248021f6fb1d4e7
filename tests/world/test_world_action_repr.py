"""The agnostic action representation: torch FK of both arms against the MuJoCo scene itself."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest
import torch

from robocoach_skills.action_contract import ACTION_DIM, pad, robot_id
from robocoach_skills.constants import ROBOTS
from robocoach_skills.sim.scene import SceneConfig, SimScene
from robocoach_skills.tasks import training_compositions
from robocoach_world.world.action_repr import REPR_DIM, AgnosticKinematics
from robocoach_world.world.arm_sketch import LINK_SAMPLES, ArmSketch
from robocoach_world.world.model import WorldConfig


@pytest.fixture(scope="module")
def kinematics() -> AgnosticKinematics:
    return AgnosticKinematics()


def _moved_scene(robot: str, seed: int) -> SimScene:
    """A scene whose arm was driven somewhere else by real physics steps (random joint targets)."""
    scene = SimScene(SceneConfig(robot=robot, render=False))
    scene.reset(training_compositions(robot)[0], seed)
    rng = np.random.default_rng(seed)
    for _ in range(8):
        scene.step(np.append(scene.joint_positions() + rng.uniform(-0.08, 0.08, scene.n_joints), 0.3))
    # ee_pose reads site_xpos, which mj_step computes before its last integration: bring it up to date.
    mujoco.mj_forward(scene.model, scene.data)
    return scene


@pytest.mark.parametrize("robot", ROBOTS)
def test_fk_matches_the_scene_tcp_after_moving_the_arm(kinematics, robot):
    for seed in (1, 2):
        scene = _moved_scene(robot, seed)
        q = np.append(scene.joint_positions(), scene.gripper_opening()).astype(np.float32)
        pos, quat = scene.ee_pose()
        expected_rot = np.zeros(9)
        mujoco.mju_quat2Mat(expected_rot, quat)
        got_pos, got_rot = kinematics.tcp_pose(
            torch.from_numpy(pad(robot, q))[None], torch.tensor([robot_id(robot)])
        )
        np.testing.assert_allclose(got_pos[0].numpy(), pos, atol=2e-5)
        np.testing.assert_allclose(got_rot[0].numpy(), expected_rot.reshape(3, 3), atol=2e-5)
        scene.close()


def test_encode_layout_and_mixed_batches(kinematics):
    """A (B, K) batch of both arms equals each arm encoded alone; 6D = first two rotation columns."""
    torch.manual_seed(0)
    actions = torch.randn(4, 3, ACTION_DIM) * 0.5
    actions[..., -1] = torch.rand(4, 3)
    ids = torch.tensor([0, 1, 1, 0])
    rep = kinematics.encode(actions, ids)
    assert rep.shape == (4, 3, REPR_DIM)
    for row in range(4):
        alone = kinematics.encode(actions[row], ids[row].expand(3))
        torch.testing.assert_close(rep[row], alone)
    pos, rot = kinematics.tcp_pose(actions, ids)
    torch.testing.assert_close(rep[..., :3], pos)
    torch.testing.assert_close(rep[..., 3:6], rot[..., :, 0])
    torch.testing.assert_close(rep[..., 6:9], rot[..., :, 1])
    torch.testing.assert_close(rep[..., -1], actions[..., -1])
    # The PiPER ignores its unused 7th slot; the Franka does not.
    bumped = actions.clone()
    bumped[..., 6] += 0.5
    moved = kinematics.encode(bumped, ids)
    torch.testing.assert_close(moved[1:3], rep[1:3])
    assert not torch.allclose(moved[0], rep[0])


def test_bad_robot_ids_are_refused(kinematics):
    actions = torch.zeros(2, 3, ACTION_DIM)
    with pytest.raises(ValueError, match="prefix"):
        kinematics.encode(actions, torch.tensor([0, 1, 0]))
    with pytest.raises(ValueError, match="robot ids"):
        kinematics.encode(actions, torch.tensor([0, len(ROBOTS)]))
    with pytest.raises(ValueError, match="channels"):
        kinematics.encode(torch.zeros(2, 7), torch.tensor([0, 1]))


@pytest.mark.parametrize("robot", ROBOTS)
def test_the_arm_sketch_draws_the_hand_and_links_where_the_scene_camera_sees_them(kinematics, robot):
    size = 64
    config = WorldConfig()
    sketch = ArmSketch(kinematics, config.sketch_link_width, config.sketch_hand_width)
    scene = _moved_scene(robot, 3)
    q = np.append(scene.joint_positions(), 0.5).astype(np.float32)
    maps = sketch(torch.from_numpy(pad(robot, q))[None], torch.tensor([robot_id(robot)]), size)[0].numpy()
    hand_col, hand_row = scene.project(scene.ee_pose()[0][None])[0]
    row, col = np.unravel_index(maps[1].argmax(), maps[1].shape)
    assert abs(col + 0.5 - hand_col) <= 1 and abs(row + 0.5 - hand_row) <= 1
    np.testing.assert_allclose(maps[2], 0.5 * maps[1], atol=1e-6)  # grip: the hand blob x opening
    # every arm body the camera sees lies on a link ridge (the bodies' own world positions, from MuJoCo)
    bodies = [scene.model.jnt_bodyid[scene.model.joint(name).id] for name in scene.arm.joint_names]
    seen = 0
    for col_b, row_b in scene.project(scene.data.xpos[bodies]):
        if 0 <= col_b < size and 0 <= row_b < size:
            seen += 1
            assert maps[0][int(row_b), int(col_b)] > 0.3
    assert seen >= 2
    far = maps[0] < 1e-3
    assert far.mean() > 0.5  # and most of the image is far from the arm
    scene.close()


def test_the_link_ridges_are_the_sum_of_gaussians_along_every_segment_of_positive_length(kinematics):
    """Against a per-pixel sum over all chain segments, both arms in one batch: leaving out the
    coincident chain points (which the sketch does before sampling) must change no pixel."""
    size, width = 16, 0.05
    sketch = ArmSketch(kinematics, link_width=width, hand_width=0.03)
    ids = torch.tensor([0, 1, 1, 0])
    padded = torch.rand(len(ids), ACTION_DIM, generator=torch.Generator().manual_seed(0)) * 2 - 1
    links = sketch(padded, ids, size)[:, 0]
    uv = sketch.project(kinematics.walk(padded, ids)[0], ids).double()  # (N, P, 2)
    pixel = (torch.arange(size, dtype=torch.float64) + 0.5) / size
    grid = torch.stack(torch.meshgrid(pixel, pixel, indexing="xy"), dim=-1)  # (S, S, 2) as (col, row)
    for row in range(len(ids)):
        expected = torch.zeros(size, size, dtype=torch.float64)
        for start, end in zip(uv[row, :-1], uv[row, 1:], strict=True):
            if torch.equal(start, end):
                continue  # a zero-length segment draws nothing
            for t in torch.linspace(0, 1, LINK_SAMPLES, dtype=torch.float64):
                centre = start + t * (end - start)
                expected += torch.exp(-((grid - centre) ** 2).sum(-1) / (2 * width**2))
        torch.testing.assert_close(links[row].double(), expected.clamp(max=1), atol=1e-5, rtol=1e-4)

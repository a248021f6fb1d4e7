"""Published kinematics and the joint-command checks of the embedded arms (no ROS, no rendering)."""

from __future__ import annotations

import math

import mujoco
import numpy as np
import pytest

from robocoach_skills.constants import ROBOTS
from robocoach_skills.sim.arms import (
    ARMS,
    check_joint_command,
    clip_joint_command,
    clip_joint_commands,
    get_arm,
)
from robocoach_skills.sim.layout import get_layout
from robocoach_skills.sim.mjcf import HAND_BODY, build_scene_xml


def mdh_forward(arm, q) -> np.ndarray:
    """Flange pose from the modified-DH table alone (Craig's convention), independent of MuJoCo."""
    pose = np.eye(4)
    for row, qi in zip(arm.mdh, q, strict=True):
        ca, sa = math.cos(row.alpha), math.sin(row.alpha)
        ct, st = math.cos(qi + row.theta_offset), math.sin(qi + row.theta_offset)
        pose = pose @ np.array(
            [
                [ct, -st, 0, row.a],
                [st * ca, ct * ca, -sa, -sa * row.d],
                [st * sa, ct * sa, ca, ca * row.d],
                [0, 0, 0, 1],
            ]
        )
    flange = np.eye(4)
    flange[2, 3] = arm.flange_offset
    return pose @ flange


def test_every_robot_has_an_arm():
    assert set(ARMS) == set(ROBOTS)
    assert get_arm("franka").n_joints == 7
    assert get_arm("piper").n_joints == 6
    with pytest.raises(ValueError, match="known robots"):
        get_arm("ur5")


@pytest.mark.parametrize("robot", ROBOTS)
def test_mujoco_model_reproduces_the_published_dh_table(robot):
    arm = get_arm(robot)
    model = mujoco.MjModel.from_xml_string(build_scene_xml(arm, get_layout(robot)))
    data = mujoco.MjData(model)
    rng = np.random.default_rng(0)
    for _ in range(5):
        q = rng.uniform(arm.lower_array, arm.upper_array)
        for name, qi in zip(arm.joint_names, q, strict=True):
            data.joint(name).qpos = qi
        mujoco.mj_kinematics(model, data)
        np.testing.assert_allclose(data.body(HAND_BODY).xpos, mdh_forward(arm, q)[:3, 3], atol=1e-6)


@pytest.mark.parametrize("robot", ROBOTS)
def test_model_joint_ranges_are_the_spec_limits(robot):
    arm = get_arm(robot)
    model = mujoco.MjModel.from_xml_string(build_scene_xml(arm, get_layout(robot)))
    for i, name in enumerate(arm.joint_names):
        np.testing.assert_allclose(model.joint(name).range, [arm.lower[i], arm.upper[i]])


@pytest.mark.parametrize("robot", ROBOTS)
def test_acceptable_command_passes(robot):
    arm = get_arm(robot)
    home = np.asarray(arm.home)
    assert check_joint_command(arm, home, home, 0.1) is None
    assert check_joint_command(arm, np.append(home, 0.5), home, 0.1) is None
    nudged = home + 0.5 * arm.velocity_array * 0.1
    assert check_joint_command(arm, np.clip(nudged, arm.lower, arm.upper), home, 0.1) is None


@pytest.mark.parametrize("robot", ROBOTS)
def test_bad_commands_are_refused_with_a_reason(robot):
    arm = get_arm(robot)
    home = np.asarray(arm.home)
    assert "values" in check_joint_command(arm, home[:-1], home, 0.1)
    assert "values" in check_joint_command(arm, np.append(home, [1.0, 1.0]), home, 0.1)
    with_nan = home.copy()
    with_nan[2] = np.nan
    assert "non-finite" in check_joint_command(arm, with_nan, home, 0.1)
    assert "gripper" in check_joint_command(arm, np.append(home, 1.5), home, 0.1)
    above = home.copy()
    above[0] = arm.upper[0] + 0.01
    reason = check_joint_command(arm, above, above, 0.1)
    assert arm.joint_names[0] in reason and "limits" in reason
    jump = np.where(home + 0.3 <= arm.upper_array, home + 0.3, home - 0.3)
    assert "rad/s" in check_joint_command(arm, jump, home, 0.01)


@pytest.mark.parametrize("robot", ROBOTS)
def test_clip_respects_position_and_velocity_limits(robot):
    arm = get_arm(robot)
    home = np.asarray(arm.home)
    dt = 0.1
    far = np.append(arm.upper_array + 5.0, 3.0)
    clipped = clip_joint_command(arm, far, home, dt)
    assert clipped.shape == (arm.action_dim,)
    assert np.all(clipped[:-1] <= arm.upper_array + 1e-12)
    assert np.all(np.abs(clipped[:-1] - home) <= arm.velocity_array * dt + 1e-12)
    assert clipped[-1] == 1.0
    assert check_joint_command(arm, clipped, home, dt) is None
    with pytest.raises(ValueError, match="non-finite"):
        clip_joint_command(arm, np.full(arm.n_joints, np.nan), home, dt)
    with pytest.raises(ValueError, match="values"):
        clip_joint_command(arm, home[:3], home, dt)


@pytest.mark.parametrize("robot", ROBOTS)
def test_clipping_many_commands_clips_each_row_as_one_command(robot):
    arm = get_arm(robot)
    rng = np.random.default_rng(0)
    current = np.asarray(arm.home) + rng.uniform(-0.2, 0.2, (5, arm.n_joints))
    wild = np.concatenate([rng.uniform(-4, 4, (5, arm.n_joints)), rng.uniform(-2, 2, (5, 1))], axis=1)
    clipped = clip_joint_commands(arm, wild, current, 0.1)
    expected = [clip_joint_command(arm, w, c, 0.1) for w, c in zip(wild, current, strict=True)]
    np.testing.assert_array_equal(clipped, np.stack(expected))
    assert all(check_joint_command(arm, q, c, 0.1) is None for q, c in zip(clipped, current, strict=True))
    wild[3, 0] = np.nan
    with pytest.raises(ValueError, match=r"non-finite values in rows \[3\]"):
        clip_joint_commands(arm, wild, current, 0.1)
    with pytest.raises(ValueError, match="must be"):
        clip_joint_commands(arm, wild[:, :-1], current, 0.1)

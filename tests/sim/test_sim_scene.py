"""The MuJoCo scene: config validation, deterministic resets, the action contract, observations."""

from __future__ import annotations

import numpy as np
import pytest

from robocoach_skills.constants import OBS_IMAGE, OBS_PROPRIO, ROBOTS
from robocoach_skills.sim.scene import SceneConfig, SimScene
from robocoach_skills.tasks import get_composition, training_compositions


@pytest.fixture(scope="module", params=ROBOTS)
def scene(request):
    scene = SimScene(SceneConfig(robot=request.param, image_size=64))
    yield scene
    scene.close()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"robot": "ur5"}, "ur5"),
        ({"image_size": 512}, "512"),
        ({"image_size": 8}, "8"),
        ({"policy_hz": 0}, "policy_hz"),
        ({"physics_dt": 0.003}, "multiple"),
        ({"physics_dt": 1.0}, "physics_dt"),
        ({"interpolation_chunks": 0}, "interpolation_chunks"),
        ({"settle_time": -1.0}, "settle_time"),
        ({"antialias_samples": -1}, "antialias_samples"),
    ],
)
def test_config_rejects_bad_values(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SceneConfig(**kwargs)


def test_reset_refuses_another_robots_composition(scene):
    other = next(r for r in ROBOTS if r != scene.config.robot)
    with pytest.raises(ValueError, match=other):
        scene.reset(training_compositions(other)[0], seed=0)


def test_same_seed_same_initial_state_and_frame(scene):
    comp = training_compositions(scene.config.robot)[0]
    first = scene.reset(comp, seed=11)
    qpos = scene.data.qpos.copy()
    second = scene.reset(comp, seed=11)
    np.testing.assert_array_equal(scene.data.qpos, qpos)
    np.testing.assert_array_equal(first[OBS_PROPRIO], second[OBS_PROPRIO])
    np.testing.assert_array_equal(first[OBS_IMAGE], second[OBS_IMAGE])


def test_different_seeds_differ(scene):
    comp = training_compositions(scene.config.robot)[0]
    a = scene.reset(comp, seed=1)
    cubes_a = scene.privileged_state()["objects"]
    b = scene.reset(comp, seed=2)
    cubes_b = scene.privileged_state()["objects"]
    assert not np.allclose(cubes_a["red_cube"]["pos"], cubes_b["red_cube"]["pos"])
    assert not np.array_equal(a[OBS_IMAGE], b[OBS_IMAGE])


def test_observation_contract(scene):
    obs = scene.reset(training_compositions(scene.config.robot)[0], seed=0)
    assert obs[OBS_IMAGE].shape == (64, 64, 3) and obs[OBS_IMAGE].dtype == np.uint8
    assert obs[OBS_PROPRIO].shape == (scene.action_dim,) and obs[OBS_PROPRIO].dtype == np.float32
    assert 0.0 <= obs[OBS_PROPRIO][-1] <= 1.0
    pos, quat = scene.ee_pose()
    assert pos.shape == (3,) and abs(np.linalg.norm(quat) - 1.0) < 1e-6


def test_step_refuses_malformed_actions(scene):
    scene.reset(training_compositions(scene.config.robot)[0], seed=0)
    hold = scene.joint_targets()
    with pytest.raises(ValueError, match="values"):
        scene.step(hold[:-1])
    bad = hold.copy()
    bad[0] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        scene.step(bad)


def test_step_clips_to_position_and_velocity_limits(scene):
    scene.reset(training_compositions(scene.config.robot)[0], seed=0)
    arm = scene.arm
    q0 = scene.joint_positions()
    wild = np.append(arm.upper_array + 10.0, 7.0)
    applied = scene.apply_action(wild)
    assert np.all(applied[:-1] <= arm.upper_array)
    assert np.all(np.abs(applied[:-1] - q0) <= arm.velocity_array * scene.dt + 1e-9)
    assert applied[-1] == 1.0
    assert np.all(scene.data.ctrl[scene._arm_act] <= arm.upper_array)


def _moving_action(scene: SimScene) -> np.ndarray:
    """A command well inside the limits that moves every joint and closes the gripper."""
    return np.append(scene.joint_positions() + 0.3 * scene.arm.velocity_array * scene.dt, 0.0)


def test_a_driver_clock_running_the_physics_in_slices_matches_a_lockstep_step(scene):
    """`command` + `run` in uneven slices is `apply_action`, bit for bit: the sim_robot node's physics
    clock simulates what the in-process loops the experts were trained in simulate."""
    composition = training_compositions(scene.config.robot)[0]
    scene.reset(composition, seed=3)
    action = _moving_action(scene)
    scene.apply_action(action)
    lockstep = scene.data.qpos.copy()
    scene.reset(composition, seed=3)
    scene.command(action)
    for steps in (1, 7, 3, scene.config.substeps - 11):  # slices across the ramp's pieces
        scene.run(steps)
    np.testing.assert_array_equal(scene.data.qpos, lockstep)
    assert scene.steps == 1  # one command


def test_a_command_mid_ramp_ramps_on_from_where_the_targets_are(scene):
    scene.reset(training_compositions(scene.config.robot)[0], seed=0)
    start = scene.joint_targets()[:-1]
    scene.command(_moving_action(scene))
    scene.run(scene.config.substeps // 2)
    midway = scene.data.ctrl[scene._arm_act].copy()
    assert np.all(midway != start)
    scene.command(np.append(start, 1.0))  # back to where it started
    scene.run(1)
    first_piece = scene.data.ctrl[scene._arm_act]  # no jump back to `start`: the first of the pieces
    np.testing.assert_allclose(first_piece, midway + (start - midway) / scene.config.interpolation_chunks)


def test_holding_still_keeps_the_arm_still(scene):
    scene.reset(training_compositions(scene.config.robot)[0], seed=0)
    scene.hold()
    q0 = scene.joint_positions()
    for _ in range(5):
        scene.step(scene.joint_targets())
    assert np.max(np.abs(scene.joint_positions() - q0)) < 0.01


def test_progress_starts_at_zero_and_unstarted_subtasks_report_nothing(scene):
    comp = get_composition(scene.config.robot, "drawer_store")
    scene.reset(comp, seed=3)
    assert scene.active_subtask == 0
    assert scene.subtask_progress(0) == 0.0
    assert not scene.subtask_success(0)
    assert scene.subtask_progress(2) == 0.0 and not scene.subtask_success(2)
    assert scene.advance() == 0
    with pytest.raises(IndexError):
        scene.subtask_progress(len(comp.subtasks))


def test_privileged_state_has_the_ground_truth(scene):
    scene.reset(get_composition(scene.config.robot, "close_then_push"), seed=5)
    state = scene.privileged_state()
    assert state["drawer"]["opening"] > 0.05  # close_drawer comes first, so it starts open
    assert set(state["buttons"]) == {"red_button", "green_button"}
    assert state["objects"]["red_cube"]["present"]
    for name, cube in state["objects"].items():
        assert cube["speed"] < 0.05, f"{name} still moving after the reset settle"


def test_render_false_gives_proprio_only():
    scene = SimScene(SceneConfig(robot="piper", render=False))
    obs = scene.reset(training_compositions("piper")[0], seed=0)
    assert OBS_IMAGE not in obs and obs[OBS_PROPRIO].shape == (7,)
    scene.close()


def test_without_anti_aliasing_only_edges_change(scene):
    """The same state rendered without multisampling: same frame size, the same colours away from
    edges, some edge pixels different (what bench/deployed_step.py trades for render time)."""
    comp = training_compositions(scene.config.robot)[0]
    smooth = scene.reset(comp, seed=5)[OBS_IMAGE]
    sharp_scene = SimScene(SceneConfig(robot=scene.config.robot, image_size=64, antialias_samples=0))
    sharp = sharp_scene.reset(comp, seed=5)[OBS_IMAGE]
    sharp_scene.close()
    difference = np.abs(smooth.astype(np.int16) - sharp.astype(np.int16)).max(axis=-1)
    assert sharp.shape == smooth.shape and difference.any()
    assert np.median(difference) == 0 and (difference > 16).mean() < 0.2

"""Teleop sources and demo-session bookkeeping, without ROS."""

from __future__ import annotations

import re

import numpy as np
import pytest

from robocoach_skills.composition import Composition, Subtask
from robocoach_skills.data.episode import Episode
from robocoach_skills.data.store import EpisodeStore, StoreInfo
from robocoach_skills.sim.arms import get_arm
from robocoach_skills.sim.scene import SceneConfig, SimScene
from robocoach_skills.teleop.scripted import ScriptedSession, ScriptedSessionConfig
from robocoach_skills.teleop.session import (
    DemoRequestSpec,
    RequestRejectedError,
    TakeResult,
    bag_path,
    describe,
    export_missing_bags,
    incomplete_takes,
    resolve_request,
    take_marker,
)
from robocoach_skills.teleop.sources import (
    CMD_ACCEPT,
    CMD_END,
    CMD_TOGGLE_GRIPPER,
    CartesianConfig,
    CartesianDriver,
    KeyboardConfig,
    KeyboardTeleop,
    LeaderArmTeleop,
    Motion,
    TwistTeleop,
)

PIPER = get_arm("piper")


def _request(**overrides) -> DemoRequestSpec:
    fields = {
        "request_id": "r1",
        "robot": "piper",
        "subtask": Subtask("place", "red_cube", "bin"),
        "composition": "pick_place_bin",
        "count": 2,
        "seeds": (4, 9),
        "reason": "first fails in 41% of imagined trials",
    }
    return DemoRequestSpec(**(fields | overrides))


# ---------------------------------------------------------------------------------------------- keyboard
def test_keys_become_capped_increments_and_commands():
    keys = KeyboardTeleop(KeyboardConfig(step=0.01, yaw_step=0.1, max_presses_per_tick=2))
    assert [keys.press(k) for k in ("w", "w", "w", "d", "q", "enter", "space", "y", "x")] == [
        None, None, None, None, None, CMD_END, CMD_TOGGLE_GRIPPER, CMD_ACCEPT, None,
    ]  # fmt: skip
    motion = keys.take_motion()
    np.testing.assert_allclose(motion.delta_pos, [0.02, -0.01, 0.0])  # three "w" capped at two
    assert motion.delta_yaw == pytest.approx(0.1)
    np.testing.assert_allclose(keys.take_motion().delta_pos, 0.0)  # held keys never queue up


def test_twist_is_integrated_while_fresh_and_ignored_when_stale():
    twist = TwistTeleop(dt=0.1)
    twist.set_twist(np.array([1.0, -2.0, 0.0]), 0.5, now=10.0)
    motion = twist.take_motion(now=10.1)
    np.testing.assert_allclose(motion.delta_pos, [0.015, -0.015, 0.0])  # clipped to full deflection
    assert motion.delta_yaw == pytest.approx(0.05)
    np.testing.assert_allclose(twist.take_motion(now=11.0).delta_pos, 0.0)  # the device went quiet


def test_leader_arm_is_followed_and_held_when_quiet():
    leader = LeaderArmTeleop(PIPER, timeout=0.3)
    start = np.asarray(PIPER.home)
    leader.start(start)
    np.testing.assert_allclose(leader.action(start, 1.0, now=0.0), [*start, 1.0])  # nothing heard yet: hold
    leader.set_positions([0.1, 0.2, -0.3, 0.0, 0.1, 0.0, 0.4], now=5.0)
    np.testing.assert_allclose(leader.action(start, 1.0, now=5.1), [0.1, 0.2, -0.3, 0.0, 0.1, 0.0, 0.4])
    np.testing.assert_allclose(leader.action(start, 1.0, now=9.0)[:6], [0.1, 0.2, -0.3, 0.0, 0.1, 0.0])
    with pytest.raises(ValueError, match="needs 6"):
        leader.set_positions([0.0, 0.0])


def test_cartesian_driver_moves_the_hand_by_the_requested_step():
    driver = CartesianDriver(PIPER, CartesianConfig(max_lead=0.05))
    q = np.asarray(PIPER.home)
    driver.start(q)
    before, rotation = driver.ik.forward(q)
    q_next = driver.step(Motion(np.array([-0.01, 0.0, -0.01])), q)
    after, rotation_after = driver.ik.forward(q_next)
    np.testing.assert_allclose(after - before, [-0.01, 0.0, -0.01], atol=1e-3)
    np.testing.assert_allclose(rotation_after, rotation, atol=0.05)  # the hand keeps its orientation
    driver.step(Motion(np.array([0.0, 0.0, -1.0])), q)  # far beyond the lead allowed
    assert np.linalg.norm(driver.setpoint - before) == pytest.approx(0.05)


# ---------------------------------------------------------------------------------------------- requests
def test_request_resolves_to_its_subtask_and_seeds():
    target = resolve_request(_request(), "piper")
    assert target.index == 1 and target.demo_composition.subtasks == (Subtask("place", "red_cube", "bin"),)
    fresh = [target.seed(k) for k in range(2, 6)]  # each site once, then new states, alike on every station
    assert [target.seed(k) for k in range(2)] == [4, 9] and len({4, 9, *fresh}) == 6
    assert fresh == [resolve_request(_request(), "piper").seed(k) for k in range(2, 6)]
    line = describe(target, accepted=1)
    assert "place(red_cube, bin)" in line and "subtask 2/2 of pick_place_bin" in line and "41%" in line
    assert "1/2 accepted" in line


@pytest.mark.parametrize(("bad_seed", "tried"), [(4, 4), (None, 8)])
def test_a_slot_that_spends_its_takes_gives_way_to_a_fresh_initial_state(tmp_path, bad_seed, tried):
    """Seed 4 never gives an accepted take: its slot gives way to the next seed, so the count is met.
    Where every take fails, the session stops after as many extra slots as the request wanted."""
    scene = SimScene(SceneConfig(robot="piper"))
    size = scene.config.image_size
    store = EpisodeStore.create(
        tmp_path / "store", StoreInfo(fps=scene.config.policy_hz, image_size=(size, size))
    )
    session = ScriptedSession(scene, store, ScriptedSessionConfig(max_takes_per_demo=2))
    target = resolve_request(_request(), "piper")  # count 2, seeds (4, 9)
    seeds: list[int] = []

    def take(target, slot, take, seed) -> TakeResult:
        seeds.append(seed)
        return TakeResult(
            episode=None, accepted=bad_seed is not None and seed != bad_seed, seed=seed, duration=0.0
        )

    session._take = take
    results = session.collect(target, on_status=lambda text, accepted: None, canceled=lambda: False)
    scene.close()
    assert len(seeds) == tried and seeds[:3] == [4, 4, 9]
    if bad_seed is not None:
        assert seeds == [4, 4, 9, target.seed(2)] and sum(r.accepted for r in results) == 2
    else:
        assert seeds == [s for k in range(4) for s in [target.seed(k)] * 2] and not any(
            r.accepted for r in results
        )


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"robot": "franka"}, "records on 'piper'"),
        ({"subtask": Subtask("juggle", "red_cube")}, "unknown skill 'juggle'"),
        ({"composition": "no_such_task"}, "unreachable initial state: no composition 'no_such_task'"),
        ({"composition": "two_buttons"}, "unreachable initial state: place(red_cube, bin) is not a subtask"),
        ({"count": 0}, "asks for 0 demos"),
    ],
)
def test_unservable_requests_say_why(overrides, reason):
    with pytest.raises(RequestRejectedError, match=re.escape(reason)):
        resolve_request(_request(**overrides), "piper")


# ---------------------------------------------------------------------------------------------- storage
def _episode(metadata: dict) -> Episode:
    steps, dof = 3, PIPER.action_dim
    return Episode(
        composition=Composition("pick_place_bin/1:place", "piper", (Subtask("place", "red_cube", "bin"),)),
        seed=4,
        fps=10.0,
        images=np.zeros((steps, 16, 16, 3), dtype=np.uint8),
        proprio=np.zeros((steps, dof), dtype=np.float32),
        actions=np.zeros((steps, dof), dtype=np.float32),
        subtask_index=np.zeros(steps, dtype=np.int16),
        progress=np.zeros(steps, dtype=np.float32),
        success=True,
        metadata=metadata,
    )


def test_take_markers_are_reported_and_swept_by_recover(tmp_path):
    store = EpisodeStore.create(tmp_path, StoreInfo(fps=10.0, image_size=(16, 16)))
    marker = take_marker(tmp_path, resolve_request(_request(), "piper"), seed=9)
    [take] = incomplete_takes(tmp_path)
    assert take["request_id"] == "r1" and take["seed"] == 9 and len(store) == 0
    assert store.recover(min_age_s=0) == [marker] and incomplete_takes(tmp_path) == []


def test_missing_bags_of_recorded_takes_are_re_exported(tmp_path):
    store = EpisodeStore.create(tmp_path / "store", StoreInfo(fps=10.0, image_size=(16, 16)))
    ours = store.add(_episode({"recorder": "demo_recorder"}))
    store.add(_episode({"operator": "scripted"}))  # not a teleop take: no bag expected
    assert export_missing_bags(store, tmp_path / "mcap") == [ours]
    assert bag_path(tmp_path / "mcap", ours).is_dir()
    assert export_missing_bags(store, tmp_path / "mcap") == []

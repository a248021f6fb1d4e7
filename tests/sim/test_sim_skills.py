"""The skill registry and its ground-truth labels, checked on one scripted demo per skill and arm."""

from __future__ import annotations

import math

import numpy as np
import pytest

from robocoach_skills.composition import Subtask
from robocoach_skills.constants import ROBOTS
from robocoach_skills.operator import ScriptedOperator
from robocoach_skills.sim.scene import SceneConfig, SimScene
from robocoach_skills.skills import SKILLS, _on_push_line, get_skill, nearest_yaw, validate_subtask
from robocoach_skills.tasks import skill_instances

REQUIRED = {"pick", "place", "push", "open_drawer", "close_drawer", "press_button"}


def test_registry_holds_the_required_skills():
    assert set(SKILLS) >= REQUIRED
    with pytest.raises(ValueError, match="known skills"):
        get_skill("juggle")


def test_subtasks_are_validated():
    validate_subtask(Subtask("place", "red_cube", "drawer"))
    with pytest.raises(ValueError, match="target"):
        validate_subtask(Subtask("place", "red_cube", "shelf"))
    with pytest.raises(ValueError, match="object"):
        validate_subtask(Subtask("press_button", "blue_button"))


def test_nearest_yaw_uses_the_symmetry():
    assert nearest_yaw(0.0, math.pi / 2, 1.5) == pytest.approx(math.pi / 2)
    assert nearest_yaw(3.0, math.pi, 0.0) == pytest.approx(3.0 - math.pi)
    assert nearest_yaw(0.1, 2 * math.pi, 6.3) == pytest.approx(0.1 + 2 * math.pi)


@pytest.fixture(scope="module", params=ROBOTS)
def fast_scene(request):
    scene = SimScene(SceneConfig(robot=request.param, render=False))
    yield scene
    scene.close()


@pytest.mark.parametrize("skill", sorted(REQUIRED))
def test_scripted_demo_labels_go_from_zero_to_one(fast_scene, skill):
    composition, index = skill_instances(fast_scene.config.robot)[skill][0]
    episode = ScriptedOperator().demo_subtask(fast_scene, composition, index, seed=0)
    assert episode.success, episode.metadata
    assert episode.progress[0] == 0.0
    assert episode.progress[-1] == 1.0
    assert np.all((episode.progress >= 0) & (episode.progress <= 1))
    assert episode.composition.subtasks == (composition.subtasks[index],)
    assert np.all(episode.subtask_index == 0)


def test_a_pressed_button_is_left_from_a_pose_the_approach_never_took(fast_scene):
    """The cap springs back: at the approach pose only the button's lamp would tell a policy that the
    press is done, so demos leave from a pose whose joints say so too."""
    composition, index = skill_instances(fast_scene.config.robot)["press_button"][0]
    for seed in range(2):
        episode = ScriptedOperator().demo_subtask(fast_scene, composition, index, seed=seed)
        joints = episode.proprio[:, :-1]  # the gripper is closed throughout
        pressed = int(np.argmax(episode.progress >= 1.0))
        assert 0 < pressed < len(episode) - 1, "the demo must end after the press latched"
        before = np.linalg.norm(joints[:pressed] - joints[-1], axis=1)
        # 0.011-0.057 rad with the retreat back at the approach height; 0.083-0.23 rad 6 cm above it
        assert before.min() > 0.07, (seed, before.min())


def test_a_push_strokes_on_from_where_the_last_stroke_left_the_hand():
    """After a stroke the fingers rest against the cube, nearer than the approach point; the hand
    strokes on from there instead of lifting and coming round again (docs/bootstrap.md)."""
    cube, u, behind, push_z, tol = np.array([0.5, 0.0]), np.array([1.0, 0.0]), 0.055, 0.02, 0.02

    def at(x: float, y: float, z: float = push_z) -> np.ndarray:
        return np.array([x, y, z])

    assert _on_push_line(at(0.47, 0.0), cube, u, behind, push_z, tol)  # fingers against the cube
    assert _on_push_line(at(0.445, 0.015), cube, u, behind, push_z, tol)  # at the approach point, a bit off
    assert not _on_push_line(at(0.47, 0.025), cube, u, behind, push_z, tol)  # off the line sideways
    assert not _on_push_line(at(0.42, 0.0), cube, u, behind, push_z, tol)  # too far back
    assert not _on_push_line(at(0.53, 0.0), cube, u, behind, push_z, tol)  # past the cube
    assert not _on_push_line(at(0.47, 0.0, push_z + 0.03), cube, u, behind, push_z, tol)  # up in the air

"""The router chains experts by skill, times out per subtask, and the deployed evaluation scores
trials with the simulator's ground truth (real MuJoCo, scripted stand-in policies)."""

from __future__ import annotations

import numpy as np
import pytest

from robocoach_skills.composition import Composition, Subtask
from robocoach_skills.evaluation import HeldTruthDetector, evaluate, evaluation_seeds, success_rate
from robocoach_skills.operator import OperatorConfig, ScriptedOperator
from robocoach_skills.router import (
    OUTCOME_SUCCESS,
    OUTCOME_TIMEOUT,
    Router,
    RouterConfig,
    TrialMonitor,
    UnknownSkillError,
)
from robocoach_skills.sim.scene import SceneConfig, SimScene
from robocoach_skills.tasks import training_compositions


class HoldStill:
    """Commands the current targets forever; `done` is a fixed probability."""

    def __init__(self, skills=("pick", "place", "push"), done: float = 0.0):
        self._skills, self.done, self.resets = tuple(skills), done, 0
        self.asked: set[bool] = set()  # the need_done flags the router passed

    def skills(self):
        return self._skills

    def version(self, skill):
        return 3

    def reset(self):
        self.resets += 1

    def act(self, obs, subtask, robot, need_done=True):
        self.asked.add(need_done)
        return np.append(obs["proprio"][:-1], 1.0), self.done


class Replay(HoldStill):
    """Replays a recorded whole-task demo; done fires where the recorded subtask index advances."""

    def __init__(self, episode):
        super().__init__(skills=episode.composition.skills)
        self.episode, self.t = episode, 0

    def reset(self):  # the replay keeps its place across subtask switches
        pass

    def act(self, obs, subtask, robot, need_done=True):
        t = min(self.t, len(self.episode) - 1)
        self.t += 1
        index = self.episode.subtask_index
        switching = t + 1 >= len(self.episode) or index[t + 1] != index[t]
        return self.episode.actions[t], 1.0 if switching else 0.0


@pytest.fixture(scope="module")
def scene():
    scene = SimScene(SceneConfig(robot="franka", render=False))
    yield scene
    scene.close()


def test_unknown_skill_names_the_known_ones():
    composition = Composition("c", "franka", (Subtask("pick", "red_cube"), Subtask("juggle", "red_cube")))
    with pytest.raises(UnknownSkillError, match=r"\['juggle'\].*known skills: pick, place, push"):
        Router(HoldStill()).route(composition)


def test_unknown_detector_is_refused():
    with pytest.raises(ValueError, match="unknown completion detector 'oracle'"):
        RouterConfig(detector="oracle")


def test_timeout_at_the_first_subtask(scene):
    composition = training_compositions("franka")[0]
    policy = HoldStill(skills=composition.skills)
    router = Router(policy, RouterConfig(deadline_steps=12))
    result = evaluate(router, scene, composition, evaluation_seeds(2))
    for trial in result.trials:
        assert trial.outcome == OUTCOME_TIMEOUT and trial.timed_out_index == 0
        assert trial.steps == 12
        assert trial.ground_truth["first_failed"] == 0 and not trial.ground_truth["success"]
        assert trial.timeout_label == f"TIMEOUT(0:{composition.skills[0]}, {composition.skills[0]}@v3)"
    assert result.success_rate == 0.0
    assert result.first_failures() == {0: 2}


def test_a_premature_switch_is_a_ground_truth_failure(scene):
    """The router trusts its detector; the evaluation does not: switching early is still a failure."""
    composition = training_compositions("franka")[0]
    router = Router(HoldStill(skills=composition.skills, done=1.0), RouterConfig(done_patience=2))
    trial = evaluate(router, scene, composition, evaluation_seeds(1)).trials[0]
    assert trial.outcome == OUTCOME_SUCCESS  # as far as the router knows
    assert trial.switch_steps == [2 * (i + 1) for i in range(len(composition.subtasks))]
    assert not trial.ground_truth["success"] and trial.ground_truth["first_failed"] == 0


def test_the_router_asks_for_the_done_probability_only_where_the_detector_or_the_monitor_reads_it(scene):
    composition = training_compositions("franka")[0]

    class Watching(TrialMonitor):
        reads_done_probability = True

    def asked(detector: str | None, monitor: TrialMonitor | None = None) -> set[bool]:
        policy = HoldStill(skills=composition.skills)
        router = Router(policy, RouterConfig(deadline_steps=3))
        if detector == "held_truth":  # reads the simulator, not the expert
            router.detector = HeldTruthDetector(router.config, scene, 0)
        router.run(scene, composition, evaluation_seeds(1)[0], monitor)
        return policy.asked

    assert asked("done_head") == {True}
    assert asked("held_truth") == {False}
    assert asked("held_truth", Watching()) == {True}


@pytest.mark.slow
def test_replayed_demo_succeeds_on_ground_truth(scene):
    composition = training_compositions("franka")[0]
    seed = evaluation_seeds(1)[0]
    demo = ScriptedOperator(OperatorConfig(seed=0)).demo_composition(scene, composition, seed)
    assert demo.success
    router = Router(Replay(demo), RouterConfig(deadline_steps=len(demo), done_patience=1))
    result = evaluate(router, scene, composition, [seed])
    trial = result.trials[0]
    assert trial.outcome == OUTCOME_SUCCESS
    assert trial.ground_truth["completed"] == [True] * len(composition.subtasks)
    assert trial.ground_truth["progress"] == pytest.approx([1.0] * len(composition.subtasks))
    assert success_rate(result.trials) == 1.0


class Schedule:
    """A stand-in scene whose active subtask completes from step `done_from` on (None: never)."""

    def __init__(self, done_from: int | None) -> None:
        self.done_from, self.step, self.active_subtask = done_from, 0, 0

    def subtask_success(self, index: int) -> bool:
        assert index == self.active_subtask
        return self.done_from is not None and self.step >= self.done_from


def _confirmed_at(done_from: int | None, hold: int, deadline: int) -> int | None:
    """The step (1-based, as the router counts) at which HeldTruthDetector confirms, None: never."""
    scene = Schedule(done_from)
    detector = HeldTruthDetector(RouterConfig(skill_deadline_steps={"pick": deadline}), scene, hold)
    detector.reset(Subtask("pick", "red_cube"))
    for step in range(1, deadline + 1):
        scene.step = step
        if detector.update({}, 0.0, np.zeros(8)):
            return step
    return None


def test_held_truth_confirms_a_hold_after_completion_or_at_the_deadline():
    assert _confirmed_at(done_from=3, hold=0, deadline=20) == 3
    assert _confirmed_at(done_from=3, hold=5, deadline=20) == 8
    assert _confirmed_at(done_from=18, hold=5, deadline=20) == 20  # the deadline comes first
    assert _confirmed_at(done_from=None, hold=5, deadline=20) is None  # never completed: never confirmed
    with pytest.raises(ValueError, match="hold_steps must be >= 0"):
        HeldTruthDetector(RouterConfig(), Schedule(None), -1)


@pytest.mark.slow
def test_held_truth_switches_a_hold_after_the_simulator_sees_completion(scene):
    """Through the router and the evaluation's ground-truth monitor (which tells the scene the active
    subtask), as stage 3 records its calibration rollouts."""
    composition = training_compositions("franka")[0]
    seed = evaluation_seeds(1)[0]
    demo = ScriptedOperator(OperatorConfig(seed=0)).demo_composition(scene, composition, seed)

    def first_switch(hold: int) -> int:
        router = Router(Replay(demo), RouterConfig(deadline_steps=len(demo)))
        router.detector = HeldTruthDetector(router.config, scene, hold)
        trial = evaluate(router, scene, composition, [seed]).trials[0]
        assert trial.ground_truth["completed"][0]
        return trial.switch_steps[0]

    assert first_switch(4) == first_switch(0) + 4

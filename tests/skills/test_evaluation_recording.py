"""Deployed evaluation can record its trials as rollout episodes, labelled with the ground truth."""

from __future__ import annotations

import numpy as np

from robocoach_skills.composition import Subtask
from robocoach_skills.data.store import EpisodeStore, StoreInfo
from robocoach_skills.evaluation import evaluate, evaluation_seeds
from robocoach_skills.router import Router, RouterConfig
from robocoach_skills.sim.scene import SceneConfig, SimScene
from robocoach_skills.tasks import get_composition

DEADLINE = 6


class Still:
    """A SkillPolicy that holds the arm where it starts: every trial times out at subtask 0."""

    def __init__(self) -> None:
        self.target: np.ndarray | None = None

    def skills(self) -> tuple[str, ...]:
        return ("press_button",)

    def reset(self) -> None:
        self.target = None

    def act(
        self, obs: dict, subtask: Subtask, robot: str, need_done: bool = True
    ) -> tuple[np.ndarray, float]:
        if self.target is None:
            self.target = obs["proprio"].copy()
        return self.target, 0.0

    def version(self, skill: str) -> int:
        return 3


def test_recorded_rollouts_are_episodes_of_every_frame_with_ground_truth(tmp_path):
    scene = SimScene(SceneConfig(robot="piper", image_size=32))
    store = EpisodeStore.create(tmp_path, StoreInfo(fps=10.0, image_size=(32, 32)))
    composition = get_composition("piper", "two_buttons")
    router = Router(Still(), RouterConfig(deadline_steps=DEADLINE))
    result = evaluate(router, scene, composition, evaluation_seeds(2), record_to=store)
    scene.close()
    assert [t.ground_truth["success"] for t in result.trials] == [False, False]
    episodes = [store.get(m.episode_id) for m in store.iter_meta()]
    assert len(episodes) == 2
    for episode, seed in zip(episodes, evaluation_seeds(2), strict=True):
        assert episode.kind == "rollout" and not episode.success and episode.seed == seed
        assert len(episode) == DEADLINE + 1  # the initial frame + one per action
        assert episode.images.shape == (DEADLINE + 1, 32, 32, 3)
        assert np.all(episode.subtask_index == 0) and np.all(episode.progress < 1.0)
        assert np.allclose(episode.actions, episode.actions[0])  # held still
        assert episode.metadata["expert_versions"] == {"press_button": 3}
        assert episode.metadata["first_failed"] == 0

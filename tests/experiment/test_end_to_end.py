"""Method (f)'s data contract: bootstrap subtask demos chained per composition, and whole-task demos,
become samples of one composition's policy that sees no subtask and learns `done` at the task's end."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from episode_factory import make_episode

from robocoach_skills.composition import Composition, Subtask
from robocoach_skills.constants import KEY_ARGUMENTS, KEY_DONE, KEY_EPISODE_ID, KEY_SKILL
from robocoach_skills.data.dataset import DatasetConfig, EpisodeDataset
from robocoach_skills.data.store import EpisodeStore, StoreInfo, episode_index
from robocoach_world.experiment.end_to_end import WholeTaskDataset, composition_demos, frames_per_subtask_demo

TASK = Composition("pick_place", "franka", (Subtask("pick", "red_cube"), Subtask("place", "red_cube")))


@pytest.fixture
def store(tmp_path) -> EpisodeStore:
    """pick_place's subtask demos (pick: 10 steps, place: 14), a whole-task demo (20), another task's."""
    store = EpisodeStore.create(tmp_path, StoreInfo(fps=10.0, image_size=(16, 16)))
    for index, (skill, steps) in enumerate((("pick", 10), ("place", 14))):
        meta = {"source_composition": TASK.name, "source_subtask_index": index}
        store.add(make_episode(skills=(skill,), steps=steps, seed=index, metadata=meta))
    store.add(
        make_episode(skills=("pick", "place"), steps=20, seed=2, metadata={"source_composition": TASK.name})
    )
    store.add(make_episode(skills=("pick",), steps=8, seed=3, metadata={"source_composition": "other"}))
    return store


def test_chained_and_whole_task_demos_train_one_policy_that_sees_no_subtask(store):
    ids = composition_demos(store, TASK)
    assert ids == ["episode_000000", "episode_000001", "episode_000002"]
    plain = EpisodeDataset(store, DatasetConfig(chunk_len=4, pad_channels=True, episode_ids=tuple(ids)))
    dataset = WholeTaskDataset(store, TASK, ids, chunk_len=4)
    done_by_episode: dict[int, list[float]] = {}
    for k in range(len(dataset)):
        sample, raw = dataset[k], plain[k]
        assert KEY_SKILL not in sample and torch.equal(
            sample[KEY_ARGUMENTS], torch.zeros(2, dtype=torch.long)
        )
        assert torch.equal(sample["action_chunk"], raw["action_chunk"])
        done_by_episode.setdefault(int(sample[KEY_EPISODE_ID]), []).append(float(sample[KEY_DONE]))
    whole = np.array(done_by_episode[episode_index("episode_000002")])
    raw_whole = np.array([float(plain[24 + t][KEY_DONE]) for t in range(20)])
    assert not any(done_by_episode[0])  # the pick demo never ends the task
    assert done_by_episode[1] == [float(plain[10 + t][KEY_DONE]) for t in range(14)] and any(
        done_by_episode[1]
    )
    assert not whole[:10].any() and raw_whole[:10].any()  # pick's end is no longer "done" ...
    assert np.array_equal(whole[10:], raw_whole[10:])  # ... place's still is


def test_frames_per_subtask_demo_is_the_mean_subtask_demo_of_the_coached_skills(store):
    assert frames_per_subtask_demo(store, "franka", [TASK]) == pytest.approx((10 + 14 + 8) / 3)
    only_pick = Composition("p", "franka", (Subtask("pick", "red_cube"),))
    assert frames_per_subtask_demo(store, "franka", [only_pick]) == pytest.approx((10 + 8) / 2)
    with pytest.raises(ValueError, match="no piper subtask demos"):
        frames_per_subtask_demo(store, "piper", [TASK])

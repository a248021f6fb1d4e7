"""EpisodeDataset: sample shapes and dtypes, action-chunk padding, done flags, filters, workers."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from episode_factory import make_episode
from torch.utils.data import DataLoader

from robocoach_skills.action_contract import argument_ids
from robocoach_skills.constants import ROBOTS
from robocoach_skills.data.dataset import DatasetConfig, EpisodeDataset, done_flags
from robocoach_skills.data.store import EpisodeStore, StoreInfo

STEPS = 12


@pytest.fixture
def store(tmp_path) -> EpisodeStore:
    """franka demo (pick, place; success), piper rollout (pick; failed), franka rollout (open_drawer)."""
    store = EpisodeStore.create(tmp_path, StoreInfo(fps=10.0, image_size=(16, 16)))
    store.add(make_episode(robot="franka", skills=("pick", "place"), seed=1))
    store.add(make_episode(robot="piper", skills=("pick",), kind="rollout", success=False, seed=2))
    store.add(make_episode(robot="franka", skills=("open_drawer",), kind="rollout", seed=3))
    return store


def test_sample_shapes_dtypes_and_values(store):
    dataset = EpisodeDataset(store, DatasetConfig(chunk_len=4, robot="franka"))
    episode = store.get("episode_000000")
    sample = dataset[5]  # step 5 of the first franka episode

    assert len(dataset) == 2 * STEPS
    expected = {
        "image": ((3, 16, 16), torch.float32),
        "subtask_start_image": ((3, 16, 16), torch.float32),
        "proprio": ((8,), torch.float32),
        "action_chunk": ((4, 8), torch.float32),
        "action_mask": ((4,), torch.bool),
        "progress": ((), torch.float32),
        "subtask_index": ((), torch.int64),
        "done": ((), torch.float32),
        "episode_id": ((), torch.int64),
        "frame_index": ((), torch.int64),
        "robot_id": ((), torch.int64),
        "arguments": ((2,), torch.int64),
    }
    tensors = {k: (tuple(v.shape), v.dtype) for k, v in sample.items() if isinstance(v, torch.Tensor)}
    assert tensors == expected
    assert set(sample) == {*expected, "skill"}
    assert torch.equal(sample["image"], torch.from_numpy(episode.images[5]).permute(2, 0, 1) / 255.0)
    assert sample["image"].min() >= 0.0 and sample["image"].max() <= 1.0
    assert torch.equal(sample["proprio"], torch.from_numpy(episode.proprio[5]))
    assert torch.equal(sample["action_chunk"], torch.from_numpy(episode.actions[5:9]))
    assert sample["action_mask"].all()
    assert sample["subtask_index"] == 0 and sample["progress"] == episode.progress[5]
    assert sample["episode_id"] == 0 and sample["frame_index"] == 5
    assert sample["robot_id"] == ROBOTS.index("franka")
    assert dataset[STEPS]["episode_id"] == 2  # the next franka episode is episode_000002
    frames = torch.from_numpy(episode.images).permute(0, 3, 1, 2) / 255.0
    second = int(np.flatnonzero(episode.subtask_index == 1)[0])  # where place starts
    assert 5 < second < STEPS - 1
    assert torch.equal(sample["subtask_start_image"], frames[0])  # step 5 is in pick, which starts at 0
    assert torch.equal(dataset[second]["subtask_start_image"], frames[second])
    assert torch.equal(dataset[STEPS - 1]["subtask_start_image"], frames[second])


def test_action_chunk_repeats_the_last_action_past_the_end(store):
    dataset = EpisodeDataset(store, DatasetConfig(chunk_len=5))
    actions = store.get("episode_000000").actions
    sample = dataset[STEPS - 3]  # 3 real actions left

    assert sample["action_mask"].tolist() == [True, True, True, False, False]
    assert torch.equal(sample["action_chunk"][:3], torch.from_numpy(actions[-3:]))
    assert torch.equal(sample["action_chunk"][3:], torch.from_numpy(actions[[-1, -1]]))


def test_history_stacks_past_frames_padding_with_the_first(store):
    dataset = EpisodeDataset(store, DatasetConfig(history=3))
    images = torch.from_numpy(store.get("episode_000000").images).permute(0, 3, 1, 2) / 255.0

    assert dataset[0]["image"].shape == (3, 3, 16, 16) and dataset[0]["proprio"].shape == (3, 8)
    assert torch.equal(dataset[0]["image"], images[[0, 0, 0]])
    assert torch.equal(dataset[5]["image"], images[3:6])


def test_done_marks_achieved_frames_and_completed_segment_ends():
    subtasks = np.array([0, 0, 1, 1, 1, 2])
    unlabelled = np.zeros(6, dtype=np.float32)
    assert done_flags(subtasks, unlabelled, success=True).tolist() == [0, 1, 0, 0, 1, 1]
    assert done_flags(subtasks, unlabelled, success=False).tolist() == [0, 1, 0, 0, 1, 0]
    achieved = np.array([0.3, 1.0, 0.0, 1.0, 1.0, 0.4], dtype=np.float32)  # subtask 1 achieved at t=3
    assert done_flags(subtasks, achieved, success=False).tolist() == [0, 1, 0, 1, 1, 0]


def test_done_in_samples_follows_the_episode(store):
    dataset = EpisodeDataset(store, DatasetConfig(robot="franka", skill="place"))  # pick 0..5, place 6..11
    assert [int(dataset[t]["done"]) for t in range(len(dataset))] == [0] * 5 + [1] + [0] * 5 + [1]
    failed = EpisodeDataset(store, DatasetConfig(success=False))
    assert sum(float(failed[t]["done"]) for t in range(len(failed))) == 0.0


def test_filters_choose_the_episodes(store):
    def episodes(**filters) -> set[int]:
        dataset = EpisodeDataset(store, DatasetConfig(**filters))
        return {int(dataset[i]["episode_id"]) for i in range(len(dataset))}

    assert episodes() == {0, 1, 2}
    assert episodes(robot="piper") == {1}
    assert episodes(skill="pick") == {0, 1}
    assert episodes(kind="rollout", robot="franka") == {2}
    assert episodes(success=True) == {0, 2}
    assert len(EpisodeDataset(store, DatasetConfig(skill="press_button"))) == 0


def test_pad_channels_lets_robots_share_a_batch(store):
    dataset = EpisodeDataset(store, DatasetConfig(chunk_len=2, pad_channels=True))
    piper = dataset[STEPS]  # first step of the piper episode
    raw = store.get(store.ids(robot="piper")[0])
    assert piper["robot_id"] == ROBOTS.index("piper")
    assert piper["proprio"].shape == (8,) and piper["proprio"][6] == 0.0  # the slot piper lacks
    assert piper["proprio"][7] == float(raw.proprio[0, -1])  # gripper stays the last channel
    assert piper["channel_mask"].tolist() == [True] * 6 + [False, True]
    batch = next(iter(DataLoader(dataset, batch_size=len(dataset))))
    assert batch["action_chunk"].shape == (3 * STEPS, 2, 8)


def test_dataloader_workers_see_every_step_once(store):
    dataset = EpisodeDataset(store, DatasetConfig(chunk_len=3, robot="franka", cache_mb=0))
    loader = DataLoader(dataset, batch_size=5, shuffle=True, num_workers=2)
    seen = []
    for batch in loader:
        assert batch["image"].shape[1:] == (3, 16, 16)
        seen += zip(batch["episode_id"].tolist(), batch["frame_index"].tolist(), strict=True)
    assert sorted(seen) == [(e, t) for e in (0, 2) for t in range(STEPS)]


@pytest.mark.parametrize("cache_mb, decodes", [(1024.0, 3), (0.0, 3 * STEPS)])
def test_samples_decode_each_episode_once_when_the_cache_holds_them(store, monkeypatch, cache_mb, decodes):
    """The cache is what keeps shuffled batches cheap; at 0 MB only the newest episode stays."""
    dataset = EpisodeDataset(store, DatasetConfig(chunk_len=2, cache_mb=cache_mb))
    calls = []
    get = store.get
    monkeypatch.setattr(store, "get", lambda episode_id: calls.append(episode_id) or get(episode_id))
    for t in range(STEPS):  # round robin over the three episodes, as a shuffled loader goes
        for episode in range(3):
            dataset[episode * STEPS + t]
    assert len(calls) == decodes and len(dataset._cache) == (3 if cache_mb else 1)


@pytest.mark.parametrize(
    "field, value", [("chunk_len", 0), ("history", 0), ("robot", "ur5"), ("kind", "sim"), ("cache_mb", -1)]
)
def test_config_rejects_bad_values(field, value):
    with pytest.raises(ValueError, match=repr(value)):
        DatasetConfig(**{field: value})


def test_samples_name_the_active_skill(store):
    dataset = EpisodeDataset(store, DatasetConfig(robot="franka"))
    episode = store.get(store.ids(robot="franka")[0])
    skills = [dataset[t]["skill"] for t in range(len(episode))]
    assert skills == [episode.composition.subtasks[i].skill for i in episode.subtask_index]
    assert set(skills) == {"pick", "place"}
    arguments = {tuple(dataset[t]["arguments"].tolist()) for t in range(len(episode))}
    assert arguments == {argument_ids(s) for s in episode.composition.subtasks}

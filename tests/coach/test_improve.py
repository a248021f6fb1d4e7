"""Improve: only the requested experts' adapters change, one new version each, exactly once per round."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from episode_factory import make_episode
from expert_helpers import TINY, clone_state, cpu_state
from torch.utils.data import DataLoader

from robocoach_skills.composition import Composition, Subtask
from robocoach_skills.data.dataset import DatasetConfig, EpisodeDataset
from robocoach_skills.data.store import EpisodeStore, StoreInfo
from robocoach_skills.experts import AdapterRegistry, ExpertConfig, ExpertLibrary, pretrain
from robocoach_world.coach.improve import ROUND_METRIC, ImproveConfig, improve_experts, replay_sample

SKILLS = ("pick", "place", "push")
OLD_DEMOS = 3  # bootstrap demos per skill
CONFIG = ImproveConfig(steps=4, batch_size=8, dense_steps=3, dense_batch_size=8)


@pytest.fixture
def setup(tmp_path):
    """A store with OLD_DEMOS demos per skill, a library pretrained on them, version 0 of every adapter."""
    config = ExpertConfig(**TINY)
    store = EpisodeStore.create(tmp_path / "store", StoreInfo(fps=10.0, image_size=(32, 32)))
    for _ in range(OLD_DEMOS):
        for skill in SKILLS:
            store.add(make_episode(skills=(skill,), size=32, steps=8, seed=len(store)))
    library = ExpertLibrary(config, skills=SKILLS)
    dataset = EpisodeDataset(store, DatasetConfig(chunk_len=config.chunk_len, pad_channels=True))
    pretrain(library, DataLoader(dataset, batch_size=8, shuffle=False), steps=3, progress=False)
    registry = AdapterRegistry(tmp_path / "adapters")
    for skill in SKILLS:
        registry.publish(library, skill, {"demos_used": OLD_DEMOS})
    return library, registry, store


def _new_demos(store, skill, n, robot="franka"):
    return [
        store.add(make_episode(robot=robot, skills=(skill,), size=32, steps=8, seed=100 + len(store)))
        for _ in range(n)
    ]


def test_only_the_requested_skills_change_and_each_gets_one_version(setup):
    library, registry, store = setup
    demos = {"pick": _new_demos(store, "pick", 4), "place": _new_demos(store, "place", 2)}
    before = clone_state(library)

    updates = improve_experts(library, registry, store, demos, round_index=0, config=CONFIG)

    trained = {f"{part}.{skill}." for part in ("adapters", "heads") for skill in ("pick", "place")}
    after = cpu_state(library.state_dict())
    for name, tensor in after.items():
        if any(name.startswith(prefix) for prefix in trained):
            assert not torch.equal(tensor, before[name]), f"{name} should have been trained"
        else:
            assert torch.equal(tensor, before[name]), f"{name} changed (push and the backbone must not)"
    assert {s: registry.versions(s) for s in SKILLS} == {"pick": [0, 1], "place": [0, 1], "push": [0]}
    assert [(u.skill, u.version, u.parent_version) for u in updates] == [("pick", 1, 0), ("place", 1, 0)]
    pick = registry.meta("pick", 1)
    assert pick.parent_version == 0 and pick.demos_used == OLD_DEMOS + 4 and pick.robot == "franka"
    assert pick.metrics[ROUND_METRIC] == 0 and pick.metrics["coach/new_demos"] == 4
    # replay: 0.5 x 4 new demos = 2 of pick's 3 older demos; 0.5 x 2 = 1 for place
    assert len(updates[0].replay_episode_ids) == 2 and len(updates[1].replay_episode_ids) == 1
    old_pick = set(store.ids(skill="pick")) - set(demos["pick"])
    assert set(updates[0].replay_episode_ids) <= old_pick


def test_a_second_call_for_the_same_round_publishes_nothing(setup):
    library, registry, store = setup
    demos = {"pick": _new_demos(store, "pick", 2)}
    first = improve_experts(library, registry, store, demos, round_index=3, config=CONFIG)
    state = clone_state(library)
    again = improve_experts(library, registry, store, demos, round_index=3, config=CONFIG)  # after a crash
    assert registry.versions("pick") == [0, 1] and again[0].version == first[0].version == 1
    assert all(torch.equal(t, state[k]) for k, t in cpu_state(library.state_dict()).items())
    improve_experts(library, registry, store, demos, round_index=4, config=CONFIG)  # the next round trains
    assert registry.versions("pick") == [0, 1, 2] and registry.meta("pick", 2).parent_version == 1


def test_replay_sample_is_seeded_and_bounded(setup):
    _, _, store = setup
    old = store.ids(skill="pick")
    assert replay_sample(store, "pick", [], 2, seed=0) == replay_sample(store, "pick", [], 2, seed=0)
    assert sorted(replay_sample(store, "pick", [], 10, seed=0)) == sorted(old)  # fewer exist: all of them
    assert replay_sample(store, "pick", old[:1], 5, seed=1) == old[1:]
    assert replay_sample(store, "pick", [], 0, seed=0) == []


def test_replay_takes_each_variant_of_a_skill_in_turn(setup):
    _, _, store = setup  # 3 bootstrap pick(red_cube) demos
    _new_demos(store, "pick", 10)  # rounds that asked for the red cube only
    green = make_episode(skills=("pick",), size=32, steps=8, seed=99)
    variant = Composition("pick", "franka", (Subtask("pick", "green_cube"),))
    green = store.add(replace(green, composition=variant))
    # 1 green demo among 14: a draw of 2 from the whole pool would miss it 86% of the time
    for seed in range(10):
        drawn = replay_sample(store, "pick", [], 2, seed=seed)
        assert green in drawn and len(drawn) == 2
    # fewer draws than variants: which variant goes first is seeded too, not alphabetical
    assert {green in replay_sample(store, "pick", [], 1, seed=seed) for seed in range(10)} == {True, False}


def test_replay_takes_each_start_of_a_skill_in_turn(setup):
    """Picks of the same cube from another task (its demos start after a press, not from home) are a
    variant of their own: coached rounds of one start must not crowd the others out of the replay."""
    _, _, store = setup  # 3 bootstrap pick(red_cube) demos, composition "pick"
    after_press = Composition("button_pick_bin/1:pick", "franka", (Subtask("pick", "red_cube"),))
    template = make_episode(skills=("pick",), size=32, steps=8, seed=98)
    for k in range(10):
        store.add(replace(template, seed=200 + k, composition=after_press))
    home = set(store.ids(skill="pick")[:OLD_DEMOS])
    for seed in range(10):
        drawn = replay_sample(store, "pick", [], 4, seed=seed)
        assert len(home & set(drawn)) == 2, drawn  # two turns each


def test_dataset_can_be_limited_to_episode_ids(setup):
    _, _, store = setup
    ids = store.ids()[:2]
    dataset = EpisodeDataset(store, DatasetConfig(chunk_len=2, episode_ids=tuple(ids)))
    assert dataset.episode_ids == ids and len(dataset) == 16
    assert {int(dataset[i]["episode_id"]) for i in range(len(dataset))} == {0, 1}


def test_unknown_episodes_are_refused(setup):
    library, registry, store = setup
    with pytest.raises(ValueError, match="episode_000999"):
        improve_experts(library, registry, store, {"pick": ["episode_000999"]}, round_index=0, config=CONFIG)
    assert registry.versions("pick") == [0]


def test_another_coach_run_in_the_same_round_number_retrains(setup):
    library, registry, store = setup
    demos = {"pick": _new_demos(store, "pick", 2)}
    improve_experts(library, registry, store, demos, round_index=0, config=CONFIG, run_id="0000abcd")
    again = improve_experts(library, registry, store, demos, round_index=0, config=CONFIG, run_id="0000abce")
    assert again[0].version == 2 and registry.versions("pick") == [0, 1, 2]

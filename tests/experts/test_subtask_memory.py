"""The subtask's first frame is looked at once: its keypoints stand in for it at every later call."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from expert_helpers import randomize_, synthetic_batch

from robocoach_skills.action_contract import pad
from robocoach_skills.composition import Subtask
from robocoach_skills.constants import (
    KEY_SUBTASK_START,
    KEY_SUBTASK_START_KEYPOINTS,
    OBS_IMAGE,
    OBS_PROPRIO,
    ROBOTS,
)
from robocoach_skills.experts import ExpertLibrary
from robocoach_skills.sim.arms import get_arm
from robocoach_skills.skill_policy import LibraryPolicy, observation_batch


@pytest.fixture
def library(config) -> ExpertLibrary:
    """Two skills whose adapters differ in the convs too (TINY puts LoRA on conv1), randomised."""
    lib = ExpertLibrary(config, skills=("pick", "place"))
    randomize_(lib.parameters())
    return lib


def test_remembered_keypoints_act_as_the_first_frame_does(library):
    batch = synthetic_batch(library.config, ROBOTS)
    remembered = {k: v for k, v in batch.items() if k != KEY_SUBTASK_START}
    for skill in ("pick", "place"):
        remembered[KEY_SUBTASK_START_KEYPOINTS] = library.start_keypoints(batch[KEY_SUBTASK_START], skill)
        torch.testing.assert_close(
            library.select_action(remembered, skill), library.select_action(batch, skill)
        )
    wrong = {**remembered, KEY_SUBTASK_START_KEYPOINTS: remembered[KEY_SUBTASK_START_KEYPOINTS][:, :-1]}
    with pytest.raises(ValueError, match=KEY_SUBTASK_START_KEYPOINTS):
        library.select_action(wrong, "pick")


def test_library_policy_looks_at_each_subtask_s_first_frame_once(library, monkeypatch):
    size = library.config.image_size
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (4, size, size, 3), dtype=np.uint8)
    proprio = pad("franka", np.append(get_arm("franka").home, 0.5).astype(np.float32))
    looked = []
    real = library.start_keypoints
    monkeypatch.setattr(
        library, "start_keypoints", lambda image, skill: looked.append(skill) or real(image, skill)
    )
    policy, subtask = LibraryPolicy(library), Subtask("pick", "red_cube")
    for frame in frames:
        _, done = policy.act({OBS_IMAGE: frame, OBS_PROPRIO: proprio}, subtask, "franka")
    assert looked == ["pick"]
    # The last call read the first frame as the subtask's start, not the frame it was given.
    batch = observation_batch(
        [{OBS_IMAGE: frames[-1], OBS_PROPRIO: proprio}], ["franka"], [subtask], library.device
    )
    first = observation_batch(
        [{OBS_IMAGE: frames[0], OBS_PROPRIO: proprio}], ["franka"], [subtask], library.device
    )
    expected = library.done_probability({**batch, KEY_SUBTASK_START: first[OBS_IMAGE]}, "pick")
    assert done == pytest.approx(float(expected[0]), abs=1e-6)
    policy.reset()
    policy.act({OBS_IMAGE: frames[0], OBS_PROPRIO: proprio}, Subtask("place", "bin"), "franka")
    assert looked == ["pick", "place"]


def test_library_policy_skips_the_done_head_between_chunks_where_nobody_reads_it(library, monkeypatch):
    size = library.config.image_size
    chunk = min(LibraryPolicy(library).config.n_action_steps, library.config.chunk_len)  # steps per chunk
    frames = np.random.default_rng(1).integers(0, 256, (2 * chunk + 1, size, size, 3), dtype=np.uint8)
    proprio = pad("franka", np.append(get_arm("franka").home, 0.5).astype(np.float32))
    subtask = Subtask("pick", "red_cube")

    def run(need_done: bool) -> tuple[list[np.ndarray], list[float]]:
        policy, actions, dones = LibraryPolicy(library), [], []
        for frame in frames:
            action, done = policy.act({OBS_IMAGE: frame, OBS_PROPRIO: proprio}, subtask, "franka", need_done)
            actions.append(action)
            dones.append(done)
        return actions, dones

    library.train()  # as a trainer leaves it: the policy puts it in eval mode, once
    actions, dones = run(True)
    assert not library.training
    heads, switches = [], []
    real = library.done_probability
    monkeypatch.setattr(library, "done_probability", lambda *a: heads.append(1) or real(*a))
    monkeypatch.setattr(library, "train", lambda mode=True: switches.append(mode) or library)
    skipped, unread = run(False)
    assert switches == [False]  # eval mode once, when the policy is made; no switch per call
    assert not heads  # the done head alone never ran
    for t, (a, b) in enumerate(zip(actions, skipped, strict=True)):
        np.testing.assert_array_equal(a, b)  # the same actions
        if t % chunk == 0:  # a new chunk: its done probability comes with it
            assert unread[t] == pytest.approx(dones[t])
        else:
            assert np.isnan(unread[t]) and not np.isnan(dones[t])

"""Imagined twins: an episode's own actions replayed open-loop in CoachWorld, labels kept."""

from __future__ import annotations

import numpy as np
import torch

from robocoach_skills.action_contract import native_dim
from robocoach_skills.data.episode import Episode
from robocoach_skills.tasks import get_composition
from robocoach_world.world.evaluate import imagined_twin
from robocoach_world.world.model import CoachWorld, WorldConfig

SIZE, STEPS = 32, 6


def _episode(robot: str) -> Episode:
    rng = np.random.default_rng(0)
    dim = native_dim(robot)
    return Episode(
        composition=get_composition(robot, "pick_place_bin"),
        seed=3,
        fps=10.0,
        images=rng.integers(0, 256, (STEPS, SIZE, SIZE, 3), dtype=np.uint8),
        proprio=rng.uniform(-0.5, 0.5, (STEPS, dim)).astype(np.float32),
        actions=rng.uniform(-0.5, 0.5, (STEPS, dim)).astype(np.float32),
        subtask_index=np.array([0, 0, 0, 1, 1, 1], dtype=np.int16),
        progress=np.linspace(0, 1, STEPS, dtype=np.float32),
        success=False,
        kind="rollout",
    )


def test_twin_keeps_labels_and_first_frame_and_imagines_the_rest():
    torch.manual_seed(0)
    world = CoachWorld(WorldConfig(image_size=SIZE, channels=(8, 16), embed_dim=32, hidden_dim=32)).eval()
    for robot in ("franka", "piper"):
        real = _episode(robot)
        twin = imagined_twin(world, real, seed=1)
        assert twin.images.shape == real.images.shape and twin.images.dtype == np.uint8
        assert np.array_equal(twin.images[0], real.images[0])
        assert not np.array_equal(twin.images[1:], real.images[1:])
        for name in ("actions", "subtask_index", "progress"):
            assert np.array_equal(getattr(twin, name), getattr(real, name))
        # proprio is imagined too (the grasp check reads it), in the arm's own width, from the real start
        assert twin.proprio.shape == real.proprio.shape and twin.proprio.dtype == real.proprio.dtype
        assert np.array_equal(twin.proprio[0], real.proprio[0])
        assert not np.array_equal(twin.proprio[1:], real.proprio[1:])
        assert twin.success == real.success and twin.composition == real.composition
        assert np.array_equal(imagined_twin(world, real, seed=1).images, twin.images)  # seeded
        one = imagined_twin(world, Episode(**{**real.__dict__, **_first(real)}))
        assert len(one) == 1


def _first(episode: Episode) -> dict:
    return {k: getattr(episode, k)[:1] for k in ("images", "proprio", "actions", "subtask_index", "progress")}

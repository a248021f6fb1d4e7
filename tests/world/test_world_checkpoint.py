"""CoachWorld checkpoints: bit-identical round trip; corrupt or mismatched ones are refused loudly."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

from robocoach_skills.action_contract import ACTION_DIM
from robocoach_skills.checkpoint import CheckpointError, save_checkpoint
from robocoach_world.world.artifacts import load_world, save_world
from robocoach_world.world.model import CoachWorld, WorldConfig

TINY = WorldConfig(image_size=32, channels=(8, 16), embed_dim=32, hidden_dim=32, latent_dim=4, robot_dim=4)


@pytest.fixture
def saved(tmp_path):
    torch.manual_seed(0)
    model = CoachWorld(TINY).eval()
    directory = save_world(tmp_path / "ckpt", model, {"step": 7, "metrics": {"loss": 0.5}})
    return model, directory


def _rollout(model: CoachWorld) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (2, 1, 32, 32, 3), dtype=torch.uint8, generator=g)
    ids = torch.tensor([0, 1])
    state = model.observe(images, torch.zeros(2, 1, ACTION_DIM), ids)
    return model.imagine(state, torch.randn(2, 3, ACTION_DIM, generator=g), ids, g)[1:]


def test_round_trip_is_bit_identical(saved):
    model, directory = saved
    loaded, meta = load_world(directory, device="cpu")
    assert meta["step"] == 7 and meta["world_config"]["hidden_dim"] == 32
    assert loaded.config == model.config
    original = model.state_dict()
    for key, tensor in loaded.state_dict().items():
        assert torch.equal(tensor, original[key]), key
    for a, b in zip(_rollout(model), _rollout(loaded), strict=True):
        assert torch.equal(a, b)


def test_corrupt_weights_are_refused(saved):
    _, directory = saved
    weights = directory / "weights.safetensors"
    data = bytearray(weights.read_bytes())
    data[-5] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="corrupt"):
        load_world(directory)


def _edit_meta(directory, **changes) -> None:
    path = directory / "meta.json"
    meta = json.loads(path.read_text())
    meta.update(changes)
    path.write_text(json.dumps(meta))


def test_other_model_version_is_refused(saved):
    _, directory = saved
    _edit_meta(directory, model_version=99)
    with pytest.raises(CheckpointError, match="version 99"):
        load_world(directory)


def test_config_that_does_not_fit_the_weights_is_refused(saved):
    _, directory = saved
    meta = json.loads((directory / "meta.json").read_text())
    _edit_meta(directory, world_config={**meta["world_config"], "hidden_dim": 48})
    with pytest.raises(CheckpointError, match="does not fit"):
        load_world(directory)


def test_unknown_config_is_refused(saved):
    _, directory = saved
    meta = json.loads((directory / "meta.json").read_text())
    _edit_meta(directory, world_config={**meta["world_config"], "depth": 3})
    with pytest.raises(CheckpointError, match="world_config"):
        load_world(directory)


def test_another_models_checkpoint_is_refused(tmp_path):
    other = CoachWorld(replace(TINY, hidden_dim=16))
    save_checkpoint(tmp_path / "judge", other.state_dict(), {"kind": "judge"})
    with pytest.raises(CheckpointError, match="judge"):
        load_world(tmp_path / "judge")
    with pytest.raises(CheckpointError):
        load_world(tmp_path / "missing")

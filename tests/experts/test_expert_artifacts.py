"""Adapter and backbone artifacts: bit-identical round trips, and bad files refused without side effects."""

from __future__ import annotations

import hashlib
import json

import pytest
import safetensors.torch
import torch
from expert_helpers import clone_state, randomize_, synthetic_batch

from robocoach_skills.experts import (
    AdapterLoadError,
    ArtifactLoadError,
    ExpertConfig,
    ExpertLibrary,
    load_adapter,
    load_backbone,
    save_adapter,
    save_backbone,
)
from robocoach_skills.experts.artifacts import ADAPTER_META, ADAPTER_WEIGHTS, BACKBONE_WEIGHTS
from robocoach_skills.experts.config import LEGACY_VALUES

ROBOTS = ("franka", "piper", "piper", "franka")


@pytest.fixture
def trained(config):
    """A library whose every tensor is non-trivial (as after training)."""
    lib = ExpertLibrary(config, skills=("pick", "place"))
    randomize_(lib.parameters())
    return lib


def _assert_same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k].cpu(), b[k].cpu()), k


def test_adapter_and_backbone_reload_bit_identically(tmp_path, config, trained):
    meta = {"version": 3, "parent_version": 2, "demos_used": 17, "metrics": {"train/loss_last": 0.25}}
    path = save_adapter(trained, "pick", tmp_path / "pick" / "v0003", meta)
    save_backbone(trained, tmp_path / "backbone", extra={"steps": 5})

    fresh = load_backbone(tmp_path / "backbone")  # config comes from the checkpoint
    assert fresh.config == config and fresh.skills == ()
    loaded = load_adapter(fresh, "pick", path)

    assert (loaded.version, loaded.parent_version, loaded.demos_used) == (3, 2, 17)
    assert loaded.metrics == {"train/loss_last": 0.25} and len(loaded.sha256) == 64
    _assert_same(fresh.skill_state_dict("pick"), trained.skill_state_dict("pick"))
    _assert_same(fresh.backbone.state_dict(), trained.backbone.state_dict())
    obs = synthetic_batch(config, ROBOTS)
    for a, b in zip(fresh.select_action(obs, "pick"), trained.select_action(obs, "pick"), strict=True):
        assert torch.equal(a, b)


def test_versions_are_immutable_and_writes_leave_no_temp_dirs(tmp_path, trained):
    save_adapter(trained, "pick", tmp_path / "v0000", {})
    with pytest.raises(FileExistsError):
        save_adapter(trained, "pick", tmp_path / "v0000", {})
    with pytest.raises(ValueError, match="unknown adapter meta fields"):
        save_adapter(trained, "pick", tmp_path / "v0001", {"demos": 3})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v0000"]


def _flip_bytes(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _truncate(path):
    path.write_bytes(path.read_bytes()[:-100])


def _rewrite_meta(path, **changes):
    meta_path = path / ADAPTER_META
    meta_path.write_text(json.dumps(json.loads(meta_path.read_text()) | changes))


def _reshape_one_tensor(path):
    """A well-formed file with a matching hash, but one tensor of the wrong shape."""
    tensors = safetensors.torch.load((path / ADAPTER_WEIGHTS).read_bytes())
    tensors["head.out.bias"] = torch.zeros(3)
    data = safetensors.torch.save(tensors)
    (path / ADAPTER_WEIGHTS).write_bytes(data)
    _rewrite_meta(path, sha256=hashlib.sha256(data).hexdigest())


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda p: _flip_bytes(p / ADAPTER_WEIGHTS), "corrupt or was modified"),
        (lambda p: _truncate(p / ADAPTER_WEIGHTS), "corrupt or was modified"),
        (lambda p: (p / ADAPTER_META).write_text("{not json"), "unreadable adapter metadata"),
        (lambda p: _rewrite_meta(p, skill="place"), "for skill 'place', not 'pick'"),
        (_reshape_one_tensor, r"head.out.bias: expected \(21,\)"),  # K=4 hand motions of 5 + done
    ],
    ids=["flipped-bytes", "truncated", "bad-meta", "wrong-skill", "wrong-shape"],
)
def test_bad_adapters_are_refused_and_the_live_weights_stay(tmp_path, trained, damage, message):
    path = save_adapter(trained, "pick", tmp_path / "v0001", {})
    randomize_(trained.adapter_parameters("pick"), seed=1)  # the live weights now differ from the file
    before = clone_state(trained)
    damage(path)
    with pytest.raises(AdapterLoadError, match=message):
        load_adapter(trained, "pick", path)
    _assert_same(trained.state_dict(), before)


def test_adapter_of_another_model_config_is_refused(tmp_path, config, trained):
    other = ExpertLibrary(ExpertConfig(**{**config.to_dict(), "lora_rank": 2}), skills=("pick",))
    path = save_adapter(other, "pick", tmp_path / "v0001", {})
    before = clone_state(trained)
    with pytest.raises(AdapterLoadError, match=r"lora_rank': \(2, 4\)"):
        load_adapter(trained, "pick", path)
    _assert_same(trained.state_dict(), before)


def test_corrupt_backbone_is_refused(tmp_path, trained):
    path = save_backbone(trained, tmp_path / "backbone")
    _flip_bytes(path / BACKBONE_WEIGHTS)
    before = clone_state(trained)
    with pytest.raises(ArtifactLoadError, match="corrupt"):
        load_backbone(path, trained)
    _assert_same(trained.state_dict(), before)


@pytest.mark.parametrize("field", sorted(LEGACY_VALUES))
def test_a_library_saved_before_a_field_existed_loads_as_it_was_built(tmp_path, config, field):
    """Artifacts written before `field` existed lack it: they load with its `LEGACY_VALUES` value."""
    old_value = LEGACY_VALUES[field]
    if getattr(config, field) == old_value:  # an opt-in flag, off by default: a library with it on
        config = ExpertConfig(**{**config.to_dict(), field: not old_value})
    assert getattr(config, field) != old_value  # else the test checks nothing
    legacy = ExpertLibrary(ExpertConfig(**{**config.to_dict(), field: old_value}), skills=("pick",))
    randomize_(legacy.parameters())
    save_backbone(legacy, tmp_path / "backbone")
    path = save_adapter(legacy, "pick", tmp_path / "pick" / "v0001", {"version": 1})
    for meta_file in (tmp_path / "backbone" / "config.json", path / ADAPTER_META):
        info = json.loads(meta_file.read_text())
        del info["config"][field]
        meta_file.write_text(json.dumps(info))

    fresh = load_backbone(tmp_path / "backbone")
    assert getattr(fresh.config, field) == old_value
    load_adapter(fresh, "pick", path)
    _assert_same(fresh.skill_state_dict("pick"), legacy.skill_state_dict("pick"))
    with pytest.raises(AdapterLoadError, match=field):
        load_adapter(ExpertLibrary(config), "pick", path)  # a library built with today's value refuses it

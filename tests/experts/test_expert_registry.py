"""The adapter registry: versions, parents, activation and rollback, and the ExpertInfo listing."""

from __future__ import annotations

import pytest
import torch
from expert_helpers import randomize_

from robocoach_skills.experts import AdapterLoadError, AdapterRegistry, ExpertLibrary
from robocoach_skills.experts.artifacts import ADAPTER_WEIGHTS


def _snapshot(lib, skill):
    return {k: v.cpu().clone() for k, v in lib.skill_state_dict(skill).items()}


def _same(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k].cpu(), b[k].cpu()) for k in a)


def test_versions_parents_activation_and_listing(tmp_path, config):
    registry = AdapterRegistry(tmp_path)
    lib = ExpertLibrary(config, skills=("pick", "place"))
    assert registry.list() == [] and registry.active_version("pick") is None

    weights = []
    for demos in (10, 15):  # bootstrap, then one coached update
        randomize_(lib.adapter_parameters("pick"), seed=demos)
        weights.append(_snapshot(lib, "pick"))
        registry.publish(lib, "pick", {"demos_used": demos, "metrics": {"train/loss_last": 0.1}})
    assert registry.versions("pick") == [0, 1] and registry.active_version("pick") == 1
    assert registry.meta("pick", 0).parent_version is None and registry.meta("pick", 1).parent_version == 0
    assert (tmp_path / "pick" / "v0001" / ADAPTER_WEIGHTS).is_file()

    registry.activate(lib, "pick", 0)  # roll back: the live weights are version 0's again
    assert not _same(weights[0], weights[1])
    assert registry.active_version("pick") == 0 and _same(lib.skill_state_dict("pick"), weights[0])
    randomize_(lib.adapter_parameters("pick"), seed=12)
    assert registry.publish(lib, "pick", {"demos_used": 12}) == 2  # max + 1 ...
    assert registry.meta("pick", 2).parent_version == 0  # ... fine-tuned from the active one
    registry.publish(lib, "place", {"demos_used": 10, "robot": "piper"})

    infos = {i.skill: i for i in registry.list()}
    assert list(infos) == ["pick", "place"]
    pick = infos["pick"]
    assert (pick.adapter_version, pick.parent_version, pick.demos_used) == (2, 0, 12)
    assert pick.adapter_hash == registry.meta("pick", 2).sha256 and infos["place"].robot == "piper"

    fresh = ExpertLibrary(config)
    assert registry.restore(fresh) == {"pick": 2, "place": 0}
    assert _same(fresh.skill_state_dict("pick"), lib.skill_state_dict("pick"))
    registry.load(fresh, "pick", 1)  # an older version to look at: the live weights change, ACTIVE does not
    assert _same(fresh.skill_state_dict("pick"), weights[1]) and registry.active_version("pick") == 2
    with pytest.raises(AdapterLoadError, match="no adapter version 5"):
        registry.load(fresh, "pick", 5)


def test_failed_activation_keeps_the_old_version_active(tmp_path, config):
    registry = AdapterRegistry(tmp_path)
    lib = ExpertLibrary(config, skills=("pick",))
    for seed in range(2):
        randomize_(lib.adapter_parameters("pick"), seed=seed)
        registry.publish(lib, "pick", {})
    live = _snapshot(lib, "pick")
    weights = tmp_path / "pick" / "v0000" / ADAPTER_WEIGHTS
    weights.write_bytes(weights.read_bytes()[:-8])  # truncated on disk

    with pytest.raises(AdapterLoadError, match="corrupt"):
        registry.activate(lib, "pick", 0)
    with pytest.raises(AdapterLoadError, match=r"no adapter version 7; it has \[0, 1\]"):
        registry.activate(lib, "pick", 7)
    assert registry.active_version("pick") == 1 and _same(lib.skill_state_dict("pick"), live)

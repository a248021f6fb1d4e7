"""The expert probe on briefly trained experts: it trains a copy (the run's experts stay as they were),
publishes one new version of the probed skill on exactly the demos it recorded, deploys the same
seeds before and after, and refuses to overwrite an earlier probe."""

from __future__ import annotations

import json

import pytest
from offboard_models import train_scripted_experts

from robocoach_skills.bootstrap import load_experts
from robocoach_skills.data.store import EpisodeStore
from robocoach_skills.evaluation import evaluation_seeds
from robocoach_world.coach.improve import ImproveConfig
from robocoach_world.coach.probe import ProbeConfig, main, probed_composition

ROBOT, TASK, SUBTASK = "piper", "two_buttons", 1  # the second press: trials run the first one before it


@pytest.fixture(scope="module")
def experts(tmp_path_factory):
    return train_scripted_experts(tmp_path_factory.mktemp("probe_experts"), ROBOT, TASK)


def test_a_probe_retrains_a_copy_of_one_expert_on_its_own_demos(experts, tmp_path):
    _, source_registry, _, _ = load_experts(experts)
    skills_before = {s: source_registry.versions(s) for s in source_registry.skills()}
    config = ProbeConfig(
        experts=experts, robot=ROBOT, task=TASK, subtask=SUBTASK, demos=2, trials=2,
        update=ImproveConfig(steps=3, batch_size=8, dense_steps=3), deadline_steps=6, out=tmp_path / "probe",
    )  # fmt: skip
    report = main(config)

    assert {s: source_registry.versions(s) for s in source_registry.skills()} == skills_before
    _, registry, versions, _ = load_experts(tmp_path / "probe" / "experts")
    skill = report["skill"]
    assert skill == "press_button" and versions[skill] == report["adapter"]["version"]
    assert report["adapter"]["version"] not in skills_before[skill]
    assert registry.meta(skill, versions[skill]).parent_version == report["adapter"]["parent"]

    store = EpisodeStore(tmp_path / "probe" / "demos")
    metas = list(store.iter_meta())
    assert len(metas) == report["demos"]["accepted"] == 2
    probed = probed_composition(ROBOT, TASK, SUBTASK).subtasks[SUBTASK]
    assert all(m.success and m.composition.subtasks == (probed,) for m in metas)

    assert report["seeds"] == evaluation_seeds(2)
    for phase in ("before", "after"):
        summary = report[phase]
        assert summary["trials"] == 2 and len(summary["steps"]) == 2
        assert len(summary["progress"]) == summary["reached"] <= 2
        assert all(0.0 <= p <= 1.0 for p in summary["progress"])
    assert json.loads((tmp_path / "probe" / "probe.json").read_text())["after"] == report["after"]
    assert (tmp_path / "probe" / "probe.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "press_button" in (tmp_path / "probe" / "probe.md").read_text()

    with pytest.raises(FileExistsError, match="already holds a probe"):
        main(config)


def test_a_subtask_index_outside_the_composition_is_refused_naming_its_subtasks():
    with pytest.raises(ValueError, match=r"two_buttons has 2 subtasks .*--subtask 2"):
        probed_composition(ROBOT, TASK, 2)


def test_a_probe_from_a_store_retrains_on_its_newest_demos_and_replays_the_older(experts, tmp_path):
    """What a coach round's update did with its demos, replayed offline: the newest `demos` demos of the
    subtask in the store are the new ones, an older one is replayed (replay ratio 0.5 of 2), and the
    store is only read."""
    update = ImproveConfig(steps=3, batch_size=8, dense_steps=3)
    common = dict(
        experts=experts, robot=ROBOT, task=TASK, subtask=SUBTASK, trials=1, update=update, deadline_steps=6
    )
    recorded = main(ProbeConfig(**common, demos=3, out=tmp_path / "recorded"))
    source = tmp_path / "recorded" / "demos"

    report = main(ProbeConfig(**common, demos=2, demos_from=source, out=tmp_path / "replayed"))

    oldest, *newest = recorded["demos"]["ids"]
    assert report["demos"]["ids"] == newest and report["demos"]["replay_ids"] == [oldest]
    assert report["demos"]["source"] == str(source) and not report["demos"]["recorded"]
    assert EpisodeStore(source).ids() == recorded["demos"]["ids"]  # nothing written to it
    assert not (tmp_path / "replayed" / "demos").exists()
    assert "2 most recent demos of it" in (tmp_path / "replayed" / "probe.md").read_text()

    with pytest.raises(
        ValueError, match=r"holds 3 successful piper demos of press_button\(.*--demos 4 asked"
    ):
        main(ProbeConfig(**common, demos=4, demos_from=source, out=tmp_path / "too_many"))
    assert not (tmp_path / "too_many").exists()  # refused before copying the experts

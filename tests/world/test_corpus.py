"""The corpus builder records demos and failure-injected rollouts from its split's own seeds."""

from __future__ import annotations

import pytest

from robocoach_skills.data.store import EpisodeStore, StoreInfo
from robocoach_skills.operator import FAILURE_MODES
from robocoach_world.corpus import SPLIT_SEED_BASES, SPLIT_SEED_SPAN, CorpusConfig, build_corpus, main


def test_corpus_mixes_demos_and_labelled_failures(tmp_path):
    store = EpisodeStore.create(tmp_path / "c", StoreInfo(fps=10.0, image_size=(16, 16)))
    config = CorpusConfig(
        split="test",
        only=("two_buttons",),
        subtask_demos=1,
        subtask_failures=1,
        composition_demos=1,
        composition_failures=1,
        image_size=16,
    )
    ids = build_corpus("piper", store, config, show_progress=False)
    assert len(ids) == config.n_episodes("piper") == 6
    metas = [store.meta(i) for i in ids]
    base = SPLIT_SEED_BASES["test"]
    assert all(base < m.seed < base + SPLIT_SEED_SPAN for m in metas)
    assert len({m.seed for m in metas}) == len(metas)  # every episode its own initial state
    for meta in metas:
        injected = meta.metadata["injected_failure"]
        assert meta.metadata["corpus_split"] == "test"
        assert (meta.kind == "rollout") == (injected is not None)
        if injected is not None:
            assert injected["mode"] in FAILURE_MODES
    assert [m.kind for m in metas].count("demo") == 3
    assert all(m.success for m in metas if m.kind == "demo")  # two_buttons presses succeed clean
    failed = [m for m in metas if not m.success]
    for meta in failed:
        assert store.get(meta.episode_id).progress[-1] < 1.0


def test_corpus_config_refuses_bad_values():
    with pytest.raises(ValueError, match="split"):
        CorpusConfig(split="dev")
    with pytest.raises(ValueError, match="subtask_demos"):
        CorpusConfig(subtask_demos=-1)
    with pytest.raises(ValueError, match="not in"):
        CorpusConfig(only=("no_such_task",)).compositions("franka")


def test_corpus_cli_records_into_a_new_store(tmp_path, capsys):
    main(
        [
            "--robot",
            "franka",
            "--out",
            str(tmp_path / "s"),
            "--only",
            "two_buttons",
            "--subtask-demos",
            "0",
            "--subtask-failures",
            "0",
            "--composition-demos",
            "1",
            "--composition-failures",
            "0",
            "--image-size",
            "16",
        ]
    )
    assert "franka: 1 episodes" in capsys.readouterr().out
    assert len(EpisodeStore(tmp_path / "s")) == 1

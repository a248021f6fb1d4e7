"""The episode store: round trip, filters, validation, corruption, versioning and crash safety."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from episode_factory import make_episode

import robocoach_skills
from robocoach_skills.data.episode import Episode
from robocoach_skills.data.store import (
    FORMAT_VERSION,
    CorruptEpisodeError,
    EpisodeNotFoundError,
    EpisodeStore,
    IncompatibleStoreError,
    StoreInfo,
)

WRITER = Path(__file__).with_name("writer_loop.py")
ARRAYS = ("images", "proprio", "actions", "subtask_index", "progress")


def new_store(root: Path, size: int = 16, compress: bool = True) -> EpisodeStore:
    return EpisodeStore.create(root, StoreInfo(fps=10.0, image_size=(size, size), compress=compress))


def assert_same_episode(got: Episode, want: Episode) -> None:
    for name in ARRAYS:
        a, b = getattr(got, name), getattr(want, name)
        assert a.dtype == b.dtype and np.array_equal(a, b), name
    for name in ("composition", "seed", "fps", "success", "kind", "metadata"):
        assert getattr(got, name) == getattr(want, name), name


def start_writer(root: Path, *args: str) -> subprocess.Popen:
    """A writer_loop.py process on `root`, importing this checkout's robocoach_skills."""
    package_root = str(Path(robocoach_skills.__file__).parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([package_root, os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(
        [sys.executable, str(WRITER), str(root), *args], stdout=subprocess.PIPE, text=True, env=env
    )
    assert proc.stdout.readline().strip() == "ready"
    return proc


def tmp_entries(root: Path) -> list[Path]:
    return sorted(root.glob(".tmp-*"))


@pytest.mark.parametrize("compress", [True, False])
def test_round_trip_keeps_arrays_and_metadata(tmp_path, compress):
    store = new_store(tmp_path / "store", compress=compress)
    episodes = [
        make_episode(seed=1),
        make_episode(
            robot="piper", kind="rollout", success=False, seed=2, metadata={"expert": {"pick": "v3"}, "n": 1}
        ),
    ]
    ids = [store.add(e) for e in episodes]

    assert ids == ["episode_000000", "episode_000001"]
    assert len(store) == 2 and store.ids() == ids
    for episode_id, episode in zip(ids, episodes, strict=True):
        assert_same_episode(store.get(episode_id), episode)
    # The documented plain-numpy read gives the same arrays.
    with np.load(tmp_path / "store/episodes/episode_000001/data.npz", allow_pickle=False) as npz:
        assert sorted(npz.files) == sorted(ARRAYS)
        assert np.array_equal(npz["proprio"], episodes[1].proprio)
    meta = json.loads((tmp_path / "store/episodes/episode_000001/meta.json").read_text())
    assert meta["length"] == 12 and meta["kind"] == "rollout" and meta["composition"]["robot"] == "piper"
    assert EpisodeStore(tmp_path / "store").get(ids[0]).seed == 1  # a second handle reads the same store


def test_filters_select_by_kind_robot_skill_and_success(tmp_path):
    store = new_store(tmp_path)
    a = store.add(make_episode(robot="franka", skills=("pick", "place"), kind="demo", success=True))
    b = store.add(make_episode(robot="franka", skills=("open_drawer",), kind="rollout", success=False))
    c = store.add(make_episode(robot="piper", skills=("pick",), kind="rollout", success=True))

    assert store.ids(kind="demo") == [a]
    assert store.ids(kind="rollout") == [b, c]
    assert store.ids(robot="piper") == [c]
    assert store.ids(skill="pick") == [a, c]
    assert store.ids(skill="place") == [a]
    assert store.ids(success=False) == [b]
    assert store.ids(robot="franka", success=True, skill="pick") == [a]
    assert store.ids(skill="press_button") == []
    assert [m.episode_id for m in store.iter_meta(kind="rollout")] == [b, c]
    assert [m.length for m in store.iter_meta()] == [12, 12, 12]


def test_ids_are_never_reused_after_delete(tmp_path):
    store = new_store(tmp_path)
    first, second = store.add(make_episode(seed=1)), store.add(make_episode(seed=2))
    store.delete(second)

    assert store.ids() == [first] and len(store) == 1
    with pytest.raises(EpisodeNotFoundError, match="episode_000001"):
        store.get(second)
    with pytest.raises(EpisodeNotFoundError):
        store.delete(second)
    assert store.add(make_episode(seed=3)) == "episode_000002"
    assert tmp_entries(tmp_path) == []


@pytest.mark.parametrize(
    "change, message",
    [
        ({"fps": 30.0}, "fps"),
        ({"size": 8}, "images"),
        ({"metadata": {"array": np.zeros(2)}}, "JSON"),
    ],
)
def test_add_refuses_episodes_that_break_the_store_features(tmp_path, change, message):
    store = new_store(tmp_path)
    with pytest.raises(ValueError, match=message):
        store.add(make_episode(**change))
    assert len(store) == 0 and tmp_entries(tmp_path) == [] and not any((tmp_path / "ids").iterdir())


def test_add_refuses_wrong_dtype_and_empty_episodes(tmp_path):
    store = new_store(tmp_path)
    episode = make_episode()
    with pytest.raises(ValueError, match="proprio is float64"):
        store.add(replace(episode, proprio=episode.proprio.astype(np.float64)))
    empty = {name: getattr(episode, name)[:0] for name in ARRAYS}
    with pytest.raises(ValueError, match="empty episode"):
        store.add(replace(episode, **empty))


def test_get_rejects_malformed_ids(tmp_path):
    with pytest.raises(EpisodeNotFoundError, match="not an episode id"):
        new_store(tmp_path).get("../info.json")


def test_corrupted_data_is_reported_with_its_path(tmp_path):
    store = new_store(tmp_path)
    episode_id = store.add(make_episode())
    data = tmp_path / "episodes" / episode_id / "data.npz"
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    data.write_bytes(bytes(raw))

    with pytest.raises(CorruptEpisodeError, match=f"{data}: sha256"):
        store.get(episode_id)
    assert [m.episode_id for m in store.iter_meta()] == [episode_id]  # metadata alone still reads

    data.unlink()
    with pytest.raises(CorruptEpisodeError, match="missing"):
        store.get(episode_id)


def test_corrupted_meta_is_reported_with_its_path(tmp_path):
    store = new_store(tmp_path)
    episode_id = store.add(make_episode())
    meta = tmp_path / "episodes" / episode_id / "meta.json"
    meta.write_text(meta.read_text()[:-20])
    with pytest.raises(CorruptEpisodeError, match=str(meta)):
        store.get(episode_id)


def test_newer_or_unknown_format_versions_are_refused(tmp_path):
    new_store(tmp_path)
    info_path = tmp_path / "info.json"
    info = json.loads(info_path.read_text())
    assert info["format_version"] == FORMAT_VERSION
    assert info["features"]["images"] == {"dtype": "uint8", "shape": [16, 16, 3], "unit": "RGB"}

    info_path.write_text(json.dumps({**info, "format_version": FORMAT_VERSION + 1}))
    with pytest.raises(IncompatibleStoreError, match="newer robocoach_skills"):
        EpisodeStore(tmp_path)
    info_path.write_text(json.dumps({**info, "format_version": "one"}))
    with pytest.raises(IncompatibleStoreError, match="unknown format"):
        EpisodeStore(tmp_path)


def test_open_and_create_are_explicit(tmp_path):
    with pytest.raises(FileNotFoundError, match="no episode store"):
        EpisodeStore(tmp_path / "nowhere")
    info = StoreInfo(fps=10.0, image_size=(16, 16))
    EpisodeStore.create(tmp_path, info)
    with pytest.raises(FileExistsError):
        EpisodeStore.create(tmp_path, info)
    assert EpisodeStore.create(tmp_path, info, exist_ok=True).info == info
    with pytest.raises(ValueError, match="not the requested"):
        EpisodeStore.create(tmp_path, StoreInfo(fps=30.0, image_size=(16, 16)), exist_ok=True)
    with pytest.raises(ValueError, match="fps"):
        StoreInfo(fps=0.0, image_size=(16, 16))


def test_leftover_tmp_dirs_are_ignored_and_recovered_after_a_grace_period(tmp_path):
    store = new_store(tmp_path)
    store.add(make_episode())
    half = tmp_path / ".tmp-deadbeef"
    half.mkdir()
    (half / "data.npz").write_bytes(b"PK half an episode")

    assert len(store) == 1 and store.ids() == ["episode_000000"]
    assert store.recover() == []  # fresh: might belong to a live writer
    an_hour_ago = time.time() - 3601
    os.utime(half, (an_hour_ago, an_hour_ago))
    assert store.recover() == [half] and not half.exists()
    assert len(store) == 1


def test_concurrent_writers_get_distinct_ids(tmp_path):
    new_store(tmp_path)
    writers = [start_writer(tmp_path, "--count", "5", "--seed", str(100 * k)) for k in range(3)]
    reported = []
    for proc in writers:
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0
        reported += out.split()

    store = EpisodeStore(tmp_path)
    assert len(reported) == len(set(reported)) == 15
    assert sorted(reported) == store.ids()
    seeds = sorted(store.get(i).seed for i in store.ids())
    assert seeds == sorted(100 * k + n for k in range(3) for n in range(5))


def test_killed_writers_leave_only_whole_episodes(tmp_path):
    """SIGKILL a writer of large episodes at random moments; readers must only ever see whole episodes."""
    new_store(tmp_path, size=96)
    store = EpisodeStore(tmp_path)
    rng = random.Random(0)
    acknowledged, seen, leftovers = [], set(), set()
    for attempt in range(6):
        proc = start_writer(tmp_path, "--steps", "100", "--size", "96", "--seed", str(1000 * attempt))
        deadline = time.monotonic() + rng.uniform(0.1, 0.8)
        while time.monotonic() < deadline:  # read each new episode while the writer runs
            for episode_id in set(store.ids()) - seen:
                assert len(store.get(episode_id)) == 100
                seen.add(episode_id)
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        out, _ = proc.communicate(timeout=10)
        assert proc.returncode == -signal.SIGKILL
        acknowledged += out.split()
        leftovers |= set(tmp_entries(tmp_path))
    killed_mid_write = len(leftovers)

    ids = store.ids()
    assert set(acknowledged) <= set(ids)  # every add() that returned survived the kills
    assert len(ids) == len(set(ids)) >= 1
    for episode_id in ids:
        assert len(store.get(episode_id)) == 100  # checksum verified inside get()
    assert killed_mid_write >= 1, "no kill landed mid-write, so the test proved nothing"

    assert store.recover(min_age_s=0) and tmp_entries(tmp_path) == []
    assert store.ids() == ids
    assert store.add(make_episode(size=96)) not in ids

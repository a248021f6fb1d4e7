"""The episode store: demos and rollouts on disk, one directory per episode, readable with plain numpy.

Layout under the store root (docs/episode_format.md is the full specification):

    info.json                          store-level, written once: format version, fps, features
    episodes/episode_000123/data.npz   arrays: images, proprio, actions, subtask_index, progress
    episodes/episode_000123/meta.json  composition, seed, fps, success, kind, metadata, length, sha256
    ids/episode_000123                 empty reservation file: each id is handed out once, never reused
    .tmp-<hex>/                        a write or delete in flight (or killed); readers never look here

Why it is built this way: demos come from long teleop sessions and rollouts from many coach
processes writing at once, and any of them can be killed. So an episode is written completely into
a private `.tmp-*` directory, fsynced, and only then renamed into `episodes/` (a rename is atomic):
readers see either the whole episode or nothing. Ids are claimed with `O_CREAT | O_EXCL` on a
reservation file, so concurrent writers never collide, and `data.npz` carries a sha256 in
`meta.json`, so a file damaged after the fact is reported instead of silently trained on.

    store = EpisodeStore.create(root, StoreInfo(fps=10.0, image_size=(96, 96)))
    episode_id = store.add(episode)  # e.g. "episode_000000"
    store.ids(robot="franka", skill="pick", success=True)
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import time
import uuid
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from robocoach_skills.composition import Composition
from robocoach_skills.data.episode import Episode
from robocoach_skills.durable import fsync_dir, write_durable

FORMAT_VERSION = 1  # bump when a reader of the previous version would misread the new layout

INFO_FILE = "info.json"
EPISODES_DIR = "episodes"
IDS_DIR = "ids"
DATA_FILE = "data.npz"
META_FILE = "meta.json"
TMP_PREFIX = ".tmp-"
EPISODE_PATH = EPISODES_DIR + "/{episode_id}"  # path templates, relative to the store root
DATA_PATH = EPISODE_PATH + "/" + DATA_FILE
META_PATH = EPISODE_PATH + "/" + META_FILE

_EPISODE_ID = re.compile(r"episode_(\d{6,})")


class EpisodeStoreError(Exception):
    """Base class of every error the episode store raises on purpose."""


class IncompatibleStoreError(EpisodeStoreError):
    """The store on disk was written in a format this code cannot read (usually: a newer one)."""


class CorruptEpisodeError(EpisodeStoreError):
    """An episode's files exist but do not hold what meta.json promises (checksum, arrays, JSON)."""


class EpisodeNotFoundError(EpisodeStoreError, LookupError):
    """No episode with that id (never written, deleted, or a malformed id)."""


def episode_id_from_index(index: int) -> str:
    """The id (and directory name) of the episode with this integer index, e.g. 123 -> "episode_000123"."""
    return f"episode_{index:06d}"


def episode_index(episode_id: str) -> int:
    """Inverse of `episode_id_from_index`; raises EpisodeNotFoundError for a string that is no episode id."""
    match = _EPISODE_ID.fullmatch(episode_id)
    if match is None:
        raise EpisodeNotFoundError(f"{episode_id!r} is not an episode id (expected e.g. 'episode_000123')")
    return int(match.group(1))


@dataclass(frozen=True)
class StoreInfo:
    """Store-level facts every episode shares; serialised as info.json (LeRobot's meta/info.json idea)."""

    fps: float  # policy steps per second of every episode in the store
    image_size: tuple[int, int]  # (height, width) of every camera frame, pixels
    compress: bool = True  # deflate data.npz: about 2-4x smaller on camera frames, slower to write and read
    format_version: int = FORMAT_VERSION  # on-disk layout version; see FORMAT_VERSION

    def __post_init__(self) -> None:
        if not self.fps > 0:
            raise ValueError(f"fps must be > 0, got {self.fps!r}")
        if len(self.image_size) != 2 or min(self.image_size) < 1:
            raise ValueError(f"image_size must be (height, width) with both >= 1, got {self.image_size!r}")
        object.__setattr__(self, "image_size", tuple(int(n) for n in self.image_size))  # lists from JSON/CLI

    @property
    def features(self) -> dict[str, dict]:
        """Per-step dtype and shape of each array in data.npz; None marks the robot-dependent width D."""
        height, width = self.image_size
        return {
            "images": {"dtype": "uint8", "shape": [height, width, 3], "unit": "RGB"},
            "proprio": {"dtype": "float32", "shape": [None], "unit": "joint positions [rad], gripper [0..1]"},
            "actions": {"dtype": "float32", "shape": [None], "unit": "joint targets [rad], gripper [0..1]"},
            "subtask_index": {"dtype": "int16", "shape": [], "unit": "index into composition.subtasks"},
            "progress": {"dtype": "float32", "shape": [], "unit": "active subtask progress [0..1]"},
        }

    def to_dict(self) -> dict:
        return {
            "format_version": self.format_version,
            "fps": self.fps,
            "image_size": list(self.image_size),
            "compress": self.compress,
            "episode_path": EPISODE_PATH,
            "data_path": DATA_PATH,
            "meta_path": META_PATH,
            "features": self.features,
        }

    @classmethod
    def from_dict(cls, d: dict, source: Path) -> StoreInfo:
        """Parse info.json, refusing any format version but ours before reading another field."""
        version = d.get("format_version")
        if version != FORMAT_VERSION:
            newer = isinstance(version, int) and version > FORMAT_VERSION
            hint = "written by a newer robocoach_skills: upgrade to read it" if newer else "unknown format"
            raise IncompatibleStoreError(
                f"{source}: episode store format version {version!r}, this code reads version "
                f"{FORMAT_VERSION} only ({hint})"
            )
        return cls(float(d["fps"]), tuple(d["image_size"]), bool(d["compress"]), version)


@dataclass(frozen=True)
class EpisodeMeta:
    """Everything about an episode except its arrays: what `iter_meta` yields, from meta.json alone."""

    episode_id: str
    composition: Composition
    seed: int
    fps: float
    success: bool
    kind: str
    length: int  # number of steps T
    sha256: str  # hex digest of data.npz
    metadata: dict = field(default_factory=dict)

    @property
    def robot(self) -> str:
        return self.composition.robot

    @classmethod
    def from_dict(cls, episode_id: str, d: dict) -> EpisodeMeta:
        return cls(
            episode_id,
            Composition.from_dict(d["composition"]),
            int(d["seed"]),
            float(d["fps"]),
            bool(d["success"]),
            str(d["kind"]),
            int(d["length"]),
            str(d["sha256"]),
            dict(d["metadata"]),
        )


def _meta_dict(episode: Episode) -> dict:
    """meta.json content without the checksum; fails early if the free-form metadata is not JSON."""
    try:
        json.dumps(episode.metadata)
    except TypeError as e:
        raise ValueError(f"episode metadata must be JSON-serialisable: {e}") from e
    return {
        "kind": episode.kind,
        "composition": episode.composition.to_dict(),
        "seed": int(episode.seed),
        "fps": float(episode.fps),
        "success": bool(episode.success),
        "length": len(episode),
        "metadata": episode.metadata,
    }


class EpisodeStore:
    """A directory of episodes. Safe for concurrent writers and readers in separate processes.

    Open an existing store with `EpisodeStore(root)`; make a new one with `EpisodeStore.create`.
    The object holds only the root and info, so it pickles cheaply into DataLoader workers.
    """

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)
        info_path = self.root / INFO_FILE
        try:
            raw = info_path.read_text()
        except FileNotFoundError:
            raise FileNotFoundError(
                f"no episode store at {self.root} (missing {INFO_FILE}); make one with EpisodeStore.create"
            ) from None
        try:
            self.info = StoreInfo.from_dict(json.loads(raw), info_path)
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise IncompatibleStoreError(f"{info_path}: unreadable store info ({e!r})") from e

    @classmethod
    def create(cls, root: Path | str, info: StoreInfo, *, exist_ok: bool = False) -> EpisodeStore:
        """Create a store at `root`; with exist_ok, open it instead if one with the same info is there.

        info.json is linked into place (no-replace), so two processes creating the same store at
        once end with one info.json and a clear error if they disagreed on it.
        """
        root = Path(root)
        for sub in (EPISODES_DIR, IDS_DIR):
            (root / sub).mkdir(parents=True, exist_ok=True)
        tmp = root / f"{TMP_PREFIX}{uuid.uuid4().hex}.json"
        write_durable(tmp, json.dumps(info.to_dict(), indent=2).encode())
        try:
            os.link(tmp, root / INFO_FILE)
        except FileExistsError:
            if not exist_ok:
                raise FileExistsError(f"an episode store already exists at {root}") from None
        finally:
            tmp.unlink()
        fsync_dir(root)
        store = cls(root)
        if store.info != info:
            raise ValueError(f"the episode store at {root} has {store.info}, not the requested {info}")
        return store

    # ---- writing -------------------------------------------------------------------------------

    def add(self, episode: Episode) -> str:
        """Write `episode` atomically and return its new id; a crash at any point leaves no half episode."""
        arrays = self._checked_arrays(episode)
        meta = _meta_dict(episode)
        tmp = self._new_tmp_path()
        tmp.mkdir()
        try:
            save = np.savez_compressed if self.info.compress else np.savez
            with open(tmp / DATA_FILE, "wb") as f:
                save(f, **arrays)
                f.flush()
                os.fsync(f.fileno())
            meta["sha256"] = hashlib.sha256((tmp / DATA_FILE).read_bytes()).hexdigest()
            write_durable(tmp / META_FILE, json.dumps(meta, indent=2).encode())
            fsync_dir(tmp)
            episode_id = self._reserve_id()
            os.rename(tmp, self._episode_dir(episode_id))
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        fsync_dir(self.root / EPISODES_DIR)
        return episode_id

    def delete(self, episode_id: str) -> None:
        """Remove an episode atomically: renamed out of `episodes/` first, then its files are removed."""
        trash = self._new_tmp_path()
        try:
            os.rename(self._episode_dir(episode_id), trash)
        except FileNotFoundError:
            raise EpisodeNotFoundError(f"no episode {episode_id!r} in {self.root}") from None
        fsync_dir(self.root / EPISODES_DIR)
        shutil.rmtree(trash)

    def recover(self, min_age_s: float = 3600.0) -> list[Path]:
        """Remove leftovers of killed writers and deleters (`.tmp-*`) older than `min_age_s`; return them.

        The age guard keeps a live writer's directory safe: only call with 0 when no writer runs.
        """
        cutoff = time.time() - min_age_s
        removed = []
        for path in self.root.glob(f"{TMP_PREFIX}*"):
            if path.lstat().st_mtime > cutoff:
                continue
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()
            removed.append(path)
        return removed

    # ---- reading -------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._list_ids())

    def ids(
        self,
        kind: str | None = None,
        robot: str | None = None,
        skill: str | None = None,
        success: bool | None = None,
    ) -> list[str]:
        """Ids of the stored episodes, oldest first, filtered as in `iter_meta`."""
        if all(f is None for f in (kind, robot, skill, success)):
            return self._list_ids()  # no meta.json to read
        return [m.episode_id for m in self.iter_meta(kind, robot, skill, success)]

    def iter_meta(
        self,
        kind: str | None = None,
        robot: str | None = None,
        skill: str | None = None,
        success: bool | None = None,
    ) -> Iterator[EpisodeMeta]:
        """Metadata of the episodes matching every filter given (skill: any subtask), oldest first.

        Cheap: reads meta.json files only, never the arrays.
        """
        for episode_id in self._list_ids():
            try:
                m = self.meta(episode_id)
            except EpisodeNotFoundError:
                continue  # deleted since it was listed
            if (
                (kind is None or m.kind == kind)
                and (robot is None or m.robot == robot)
                and (skill is None or skill in m.composition.skills)
                and (success is None or m.success == success)
            ):
                yield m

    def meta(self, episode_id: str) -> EpisodeMeta:
        """One episode's meta.json, parsed."""
        path = self._episode_dir(episode_id) / META_FILE
        try:
            return EpisodeMeta.from_dict(episode_id, json.loads(path.read_bytes()))
        except FileNotFoundError:
            raise EpisodeNotFoundError(f"no episode {episode_id!r} in {self.root}") from None
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
            raise CorruptEpisodeError(f"{path}: unreadable episode metadata ({e!r})") from e

    def get(self, episode_id: str) -> Episode:
        """Load one episode, verifying data.npz against the sha256 recorded in meta.json."""
        meta = self.meta(episode_id)
        path = self._episode_dir(episode_id) / DATA_FILE
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            if self._episode_dir(episode_id).exists():
                raise CorruptEpisodeError(f"{path}: missing although meta.json exists") from None
            raise EpisodeNotFoundError(f"no episode {episode_id!r} in {self.root}") from None
        digest = hashlib.sha256(raw).hexdigest()
        if digest != meta.sha256:
            raise CorruptEpisodeError(f"{path}: sha256 {digest} does not match {meta.sha256} in meta.json")
        try:
            with np.load(io.BytesIO(raw), allow_pickle=False) as npz:
                arrays = {name: npz[name] for name in self.info.features}  # named like Episode's fields
        except (KeyError, ValueError, OSError, zipfile.BadZipFile) as e:
            raise CorruptEpisodeError(f"{path}: unreadable arrays ({e!r})") from e
        return Episode(
            composition=meta.composition,
            seed=meta.seed,
            fps=meta.fps,
            success=meta.success,
            kind=meta.kind,
            metadata=meta.metadata,
            **arrays,
        )

    # ---- internals -----------------------------------------------------------------------------

    def _episode_dir(self, episode_id: str) -> Path:
        episode_index(episode_id)  # refuse anything that is not an id, e.g. "../info.json"
        return self.root / EPISODE_PATH.format(episode_id=episode_id)

    def _new_tmp_path(self) -> Path:
        return self.root / f"{TMP_PREFIX}{uuid.uuid4().hex}"

    def _list_ids(self) -> list[str]:
        return self._sorted_ids(self.root / EPISODES_DIR)

    @staticmethod
    def _sorted_ids(directory: Path) -> list[str]:
        names = (entry.name for entry in os.scandir(directory))
        return sorted((n for n in names if _EPISODE_ID.fullmatch(n)), key=episode_index)

    def _reserve_id(self) -> str:
        """Claim the next free id: O_CREAT|O_EXCL makes exactly one of several racing writers win each."""
        ids_dir = self.root / IDS_DIR
        reserved = self._sorted_ids(ids_dir)
        index = episode_index(reserved[-1]) + 1 if reserved else 0
        while True:
            episode_id = episode_id_from_index(index)
            try:
                os.close(os.open(ids_dir / episode_id, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
            except FileExistsError:
                index += 1
                continue
            fsync_dir(ids_dir)
            return episode_id

    def _checked_arrays(self, episode: Episode) -> dict[str, np.ndarray]:
        """The arrays to save, after checking them against the store's features (dtype, per-step shape)."""
        if episode.fps != self.info.fps:
            raise ValueError(f"episode fps {episode.fps!r} differs from the store's {self.info.fps!r}")
        if len(episode) == 0:
            raise ValueError("cannot store an empty episode (0 steps)")
        arrays = {name: getattr(episode, name) for name in self.info.features}
        for name, feature in self.info.features.items():
            array = arrays[name]
            step_shape = list(array.shape[1:])
            ok_shape = len(step_shape) == len(feature["shape"]) and all(
                want is None or want == got for want, got in zip(feature["shape"], step_shape, strict=True)
            )
            if array.dtype != np.dtype(feature["dtype"]) or not ok_shape:
                raise ValueError(
                    f"episode {name} is {array.dtype} with per-step shape {tuple(step_shape)}; the store "
                    f"wants {feature['dtype']} {tuple(feature['shape'])} (None: any)"
                )
        if episode.proprio.shape[1] != episode.actions.shape[1]:
            widths = episode.proprio.shape[1], episode.actions.shape[1]
            raise ValueError(f"proprio width {widths[0]} differs from actions width {widths[1]}")
        return arrays

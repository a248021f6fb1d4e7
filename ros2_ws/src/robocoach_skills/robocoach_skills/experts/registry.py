"""Adapter versions per skill on disk, and which one is active.

    root/pick/v0000/{adapter.safetensors, meta.json}   bootstrap (parent None)
    root/pick/v0001/...                                fine-tuned from v0000
    root/pick/ACTIVE                                   "1"

Versions are immutable; publishing writes a new one (max + 1, parent = the active one) and makes
it active, since it holds the weights the library is running. Activating loads an existing version
through artifacts.load_adapter: if that fails, the error propagates and nothing changes, neither
the library nor ACTIVE. One writer per root at a time (the experts' trainer or executor).

    registry = AdapterRegistry(root)
    v = registry.publish(lib, "pick", {"demos_used": 10, "metrics": metrics})
    registry.activate(lib, "pick", v - 1)   # roll back
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from robocoach_skills.checkpoint import replace_file_atomically
from robocoach_skills.experts.artifacts import AdapterLoadError, AdapterMeta, load_adapter, save_adapter
from robocoach_skills.experts.model import SKILL_NAME, ExpertLibrary

VERSION_DIR = re.compile(r"v(\d{4,})")
ACTIVE_FILE = "ACTIVE"


@dataclass(frozen=True)
class AdapterInfo:
    """One skill's active adapter: the fields of robocoach_msgs/ExpertInfo."""

    skill: str
    robot: str  # "" when trained on both arms
    adapter_version: int
    parent_version: int | None  # None for a bootstrap adapter
    demos_used: int
    adapter_hash: str  # sha256 of adapter.safetensors
    metrics: dict[str, float]  # ExpertInfo's parallel metric_names / metric_values

    @classmethod
    def from_meta(cls, meta: AdapterMeta) -> AdapterInfo:
        return cls(
            skill=meta.skill,
            robot=meta.robot,
            adapter_version=meta.version,
            parent_version=meta.parent_version,
            demos_used=meta.demos_used,
            adapter_hash=meta.sha256,
            metrics=meta.metrics,
        )


class AdapterRegistry:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def skills(self) -> list[str]:
        """Skills with at least one published version."""
        if not self.root.is_dir():
            return []
        dirs = (p.name for p in self.root.iterdir() if p.is_dir() and SKILL_NAME.fullmatch(p.name))
        return sorted(name for name in dirs if self.versions(name))

    def versions(self, skill: str) -> list[int]:
        d = self._skill_dir(skill)
        if not d.is_dir():
            return []
        return sorted(int(m[1]) for p in d.iterdir() if (m := VERSION_DIR.fullmatch(p.name)))

    def path(self, skill: str, version: int) -> Path:
        return self._skill_dir(skill) / f"v{version:04d}"

    def active_version(self, skill: str) -> int | None:
        f = self._skill_dir(skill) / ACTIVE_FILE
        return int(f.read_text()) if f.exists() else None

    def meta(self, skill: str, version: int) -> AdapterMeta:
        return AdapterMeta.read(self.path(skill, version))

    def publish(self, library: ExpertLibrary, skill: str, meta: Mapping[str, Any]) -> int:
        """Save `skill`'s live adapter as version max + 1 (parent: the active one) and activate it.

        `meta` holds demos_used, metrics, robot; the registry sets version and parent_version.
        """
        if {"version", "parent_version"} & set(meta):
            raise ValueError("publish sets version and parent_version itself; leave them out of meta")
        version = max(self.versions(skill), default=-1) + 1
        fields = {**meta, "version": version, "parent_version": self.active_version(skill)}
        save_adapter(library, skill, self.path(skill, version), fields)
        self._set_active(skill, version)
        return version

    def activate(self, library: ExpertLibrary, skill: str, version: int) -> AdapterMeta:
        """Load `version` into `library` and mark it active; on any failure the old one stays active."""
        meta = self.load(library, skill, version)
        self._set_active(skill, version)
        return meta

    def load(self, library: ExpertLibrary, skill: str, version: int) -> AdapterMeta:
        """Load `version` into `library`, leaving ACTIVE as it is (e.g. to evaluate an older one)."""
        if version not in (known := self.versions(skill)):
            raise AdapterLoadError(f"skill {skill!r} has no adapter version {version}; it has {known}")
        path = self.path(skill, version)
        if self.meta(skill, version).version != version:
            raise AdapterLoadError(f"{path} says it is another version than {version}")
        return load_adapter(library, skill, path)

    def load_request(self, library: ExpertLibrary, skill: str, version: int, uri: str = "") -> AdapterMeta:
        """What a LoadAdapter call asks for: a version of this registry, or (`uri`) an adapter
        directory from elsewhere (e.g. published by a coach on another machine).

        Either way the files are verified before the live weights change; on any failure
        AdapterLoadError is raised and the previous version stays active.
        """
        if not uri:
            return self.activate(library, skill, version)
        path = Path(uri.removeprefix("file://"))
        if AdapterMeta.read(path).version != version:
            raise AdapterLoadError(f"{path} holds another version than {version}")
        return load_adapter(library, skill, path)

    def restore(self, library: ExpertLibrary) -> dict[str, int]:
        """Load every skill's active version into `library` (e.g. when an executor starts)."""
        restored = {}
        for skill in self.skills():
            version = self.active_version(skill)
            if version is not None:
                self.activate(library, skill, version)
                restored[skill] = version
        return restored

    def list(self) -> list[AdapterInfo]:
        """The active adapter of every skill that has one, sorted by skill."""
        infos = []
        for skill in self.skills():
            version = self.active_version(skill)
            if version is not None:
                infos.append(AdapterInfo.from_meta(self.meta(skill, version)))
        return infos

    def _skill_dir(self, skill: str) -> Path:
        if not SKILL_NAME.fullmatch(skill):  # also keeps paths inside root
            raise ValueError(f"skill names are identifiers ([A-Za-z][A-Za-z0-9_]*), got {skill!r}")
        return self.root / skill

    def _set_active(self, skill: str, version: int) -> None:
        replace_file_atomically(self._skill_dir(skill) / ACTIVE_FILE, f"{version}\n".encode())

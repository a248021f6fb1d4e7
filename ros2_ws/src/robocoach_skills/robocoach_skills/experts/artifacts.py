"""Adapters and backbones as files: safetensors weights + JSON metadata, written atomically.

An adapter version is a directory:

    v0003/adapter.safetensors   the skill's "adapter.*" (LoRA A/B) and "head.*" tensors
    v0003/meta.json             AdapterMeta: skill, version, parent, demos, metrics, sha256, config...

Loading is verify-then-apply: the weights file is read once, its sha256 checked against the
metadata, parsed by safetensors (never pickle / torch.load), every tensor's name, shape and dtype
checked against the live library, and only then copied in. Any failure raises AdapterLoadError
and leaves the library exactly as it was.

    path = save_adapter(lib, "pick", root / "pick" / "v0001", {"version": 1, "demos_used": 10})
    load_adapter(fresh_lib, "pick", path)
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import safetensors.torch
import torch

from robocoach_skills.checkpoint import (
    CheckpointError,
    json_bytes,
    read_verified,
    robocoach_version,
    state_mismatches,
    write_atomically,
)
from robocoach_skills.experts.config import LEGACY_VALUES, ExpertConfig
from robocoach_skills.experts.model import ExpertLibrary

FORMAT_VERSION = 1  # bump when the layout or the meta fields change incompatibly
ADAPTER_WEIGHTS = "adapter.safetensors"
ADAPTER_META = "meta.json"
BACKBONE_WEIGHTS = "backbone.safetensors"
BACKBONE_META = "config.json"
CALLER_FIELDS = ("version", "parent_version", "demos_used", "metrics", "robot")  # what save_adapter takes


class ArtifactLoadError(CheckpointError):
    """A checkpoint that must not be loaded (corrupt, tampered with, or built for another model)."""


class AdapterLoadError(ArtifactLoadError):
    """An adapter version that must not be loaded; the previously active weights stay in place."""


@dataclass(frozen=True)
class AdapterMeta:
    """meta.json of one adapter version (mirrors robocoach_msgs/ExpertInfo plus provenance)."""

    skill: str
    version: int
    parent_version: int | None  # the version it was fine-tuned from; None for a bootstrap adapter
    demos_used: int  # total demonstrations the adapter was trained on
    metrics: dict[str, float]  # training metrics, e.g. {"train/loss_last": 0.02}
    robot: str  # embodiment it was last trained for; "" when trained on both
    sha256: str  # of adapter.safetensors
    config: dict[str, Any]  # ExpertConfig.adapter_signature() of the library it came from
    torch_version: str
    robocoach_version: str
    created: str  # ISO 8601, UTC
    format_version: int = FORMAT_VERSION
    tensors: dict[str, list[int]] = field(default_factory=dict)  # name -> shape, for humans

    @classmethod
    def read(cls, directory: Path) -> AdapterMeta:
        path = Path(directory) / ADAPTER_META
        try:
            raw = json.loads(path.read_text())
            meta = cls(**raw)
        except (OSError, json.JSONDecodeError, TypeError) as e:
            raise AdapterLoadError(f"unreadable adapter metadata {path}: {e}") from e
        if meta.format_version != FORMAT_VERSION:
            raise AdapterLoadError(
                f"{path} has format_version {meta.format_version}, expected {FORMAT_VERSION}"
            )
        return meta


def save_adapter(library: ExpertLibrary, skill: str, directory: Path, meta: Mapping[str, Any]) -> Path:
    """Write `skill`'s adapter + head as a new version directory; returns it. Fails if it exists.

    `meta` holds the caller's fields (CALLER_FIELDS); hashes, config and versions are added here.
    The directory appears complete or not at all (written under a temporary name, then renamed).
    """
    unknown = sorted(set(meta) - set(CALLER_FIELDS))
    if unknown:
        raise ValueError(f"unknown adapter meta fields {unknown}; allowed: {CALLER_FIELDS}")
    tensors = {k: v.detach().cpu().contiguous() for k, v in library.skill_state_dict(skill).items()}
    data = safetensors.torch.save(tensors, metadata={"skill": skill})
    full = AdapterMeta(
        skill=skill,
        version=int(meta.get("version", 0)),
        parent_version=meta.get("parent_version"),
        demos_used=int(meta.get("demos_used", 0)),
        metrics={k: float(v) for k, v in meta.get("metrics", {}).items()},
        robot=str(meta.get("robot", "")),
        sha256=hashlib.sha256(data).hexdigest(),
        config=library.config.adapter_signature(),
        torch_version=torch.__version__,
        robocoach_version=robocoach_version(),
        created=datetime.now(UTC).isoformat(timespec="seconds"),
        tensors={k: list(v.shape) for k, v in tensors.items()},
    )
    return write_atomically(Path(directory), {ADAPTER_WEIGHTS: data, ADAPTER_META: json_bytes(asdict(full))})


def load_adapter(library: ExpertLibrary, skill: str, directory: Path) -> AdapterMeta:
    """Verify the adapter version in `directory` and make it `skill`'s live adapter + head.

    Raises AdapterLoadError (corrupt or truncated file, hash mismatch, wrong skill, other model
    config, tensor name/shape/dtype mismatch) before anything in `library` changes.
    """
    directory = Path(directory)
    meta = AdapterMeta.read(directory)
    if meta.skill != skill:
        raise AdapterLoadError(f"{directory} holds an adapter for skill {meta.skill!r}, not {skill!r}")
    expected_config = library.config.adapter_signature()
    stored_config = {**LEGACY_VALUES, **meta.config}
    if stored_config != expected_config:
        diff = {k: (stored_config.get(k), v) for k, v in expected_config.items() if stored_config.get(k) != v}
        raise AdapterLoadError(f"{directory} was built for another model config (file, library): {diff}")
    tensors = read_verified(directory / ADAPTER_WEIGHTS, meta.sha256, AdapterLoadError)
    problems = state_mismatches(library.skill_state_template(), tensors)
    if problems:
        raise AdapterLoadError(f"{directory} does not fit skill {skill!r}: {'; '.join(problems)}")
    library.load_skill_state_dict(skill, tensors)
    return meta


def save_backbone(library: ExpertLibrary, directory: Path, extra: Mapping[str, Any] | None = None) -> Path:
    """Write the backbone (weights + full ExpertConfig + `extra`, e.g. steps and metrics) atomically."""
    tensors = {k: v.detach().cpu().contiguous() for k, v in library.backbone.state_dict().items()}
    data = safetensors.torch.save(tensors)
    info = {
        "format_version": FORMAT_VERSION,
        "config": library.config.to_dict(),
        "sha256": hashlib.sha256(data).hexdigest(),
        "torch_version": torch.__version__,
        "robocoach_version": robocoach_version(),
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "extra": dict(extra or {}),
    }
    return write_atomically(Path(directory), {BACKBONE_WEIGHTS: data, BACKBONE_META: json_bytes(info)})


def load_backbone(directory: Path, library: ExpertLibrary | None = None) -> ExpertLibrary:
    """Load a backbone checkpoint into `library` (or a new, skill-less library built from its config).

    Raises ArtifactLoadError before changing `library` if the file is corrupt or does not fit.
    """
    directory = Path(directory)
    try:
        info = json.loads((directory / BACKBONE_META).read_text())
        config = ExpertConfig.from_dict(info["config"])
    except (OSError, json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
        raise ArtifactLoadError(f"unreadable backbone metadata in {directory}: {e}") from e
    if info.get("format_version") != FORMAT_VERSION:
        raise ArtifactLoadError(f"{directory} has format_version {info.get('format_version')!r}")
    tensors = read_verified(directory / BACKBONE_WEIGHTS, info.get("sha256", ""), ArtifactLoadError)
    library = library if library is not None else ExpertLibrary(config)
    problems = state_mismatches(library.backbone.state_dict(), tensors)
    if problems:
        raise ArtifactLoadError(f"{directory} does not fit this backbone: {'; '.join(problems)}")
    library.backbone.load_state_dict(tensors)
    return library

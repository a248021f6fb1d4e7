"""Model checkpoints as files: safetensors weights + JSON metadata, written atomically.

One format for every trained model (world model, judge, expert backbones and adapters), so every
loader refuses the same things the same way: a checkpoint is a directory

    <name>/weights.safetensors   the tensors (never pickle / torch.load)
    <name>/meta.json             the caller's metadata + format_version, sha256 of the weights, versions

that appears complete or not at all. Loading reads the weights once, checks their sha256 against
the metadata, and only then parses them; anything wrong raises CheckpointError with the reason.

    save_checkpoint(root / "v0001", model.state_dict(), {"config": asdict(config), "kind": "judge"})
    tensors, meta = load_checkpoint(root / "v0001", kind="judge")
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import safetensors.torch
import torch
from safetensors import SafetensorError

from robocoach_skills.durable import fsync_dir, write_durable

FORMAT_VERSION = 1  # bump when the layout or the reserved meta fields change incompatibly
WEIGHTS_FILE = "weights.safetensors"
META_FILE = "meta.json"
RESERVED_META = ("format_version", "sha256", "torch_version", "robocoach_version", "created", "tensors")


class CheckpointError(RuntimeError):
    """A checkpoint that must not be loaded (missing, corrupt, tampered with, or for another model)."""


def save_checkpoint(directory: Path, tensors: Mapping[str, torch.Tensor], meta: Mapping[str, Any]) -> Path:
    """Write `tensors` and `meta` (JSON-able) as a new checkpoint directory; fails if it exists."""
    clash = sorted(set(meta) & set(RESERVED_META))
    if clash:
        raise ValueError(f"checkpoint meta fields {clash} are reserved (filled in by save_checkpoint)")
    cpu = {k: v.detach().cpu().contiguous() for k, v in tensors.items()}
    data = safetensors.torch.save(cpu)
    full = {
        **meta,
        "format_version": FORMAT_VERSION,
        "sha256": hashlib.sha256(data).hexdigest(),
        "torch_version": torch.__version__,
        "robocoach_version": robocoach_version(),
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "tensors": {k: list(v.shape) for k, v in cpu.items()},
    }
    return write_atomically(Path(directory), {WEIGHTS_FILE: data, META_FILE: json_bytes(full)})


def load_checkpoint(directory: Path, kind: str | None = None) -> tuple[dict[str, torch.Tensor], dict]:
    """Read and verify a checkpoint; with `kind`, also require meta["kind"] == kind."""
    directory = Path(directory)
    meta = read_meta(directory)
    if kind is not None and meta.get("kind") != kind:
        raise CheckpointError(f"{directory} holds a {meta.get('kind')!r} checkpoint, not a {kind!r} one")
    return read_verified(directory / WEIGHTS_FILE, meta.get("sha256", ""), CheckpointError), meta


def read_meta(directory: Path) -> dict:
    """meta.json of a checkpoint, checked for a known format_version."""
    path = Path(directory) / META_FILE
    try:
        meta = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise CheckpointError(f"unreadable checkpoint metadata {path}: {e}") from e
    if not isinstance(meta, dict) or meta.get("format_version") != FORMAT_VERSION:
        found = meta.get("format_version") if isinstance(meta, dict) else None
        raise CheckpointError(f"{path} has format_version {found!r}, expected {FORMAT_VERSION}")
    return meta


def check_fits(
    directory: Path, expected: Mapping[str, torch.Tensor], got: Mapping[str, torch.Tensor]
) -> None:
    """Raise CheckpointError naming every tensor of `got` that is missing, extra or misshapen."""
    problems = state_mismatches(expected, got)
    if problems:
        raise CheckpointError(f"{directory} does not fit this model: {'; '.join(problems)}")


def state_mismatches(expected: Mapping[str, torch.Tensor], got: Mapping[str, torch.Tensor]) -> list[str]:
    """Human-readable differences in names, shapes and dtypes between two tensor dicts ([] if none)."""
    problems = [f"missing tensor {k!r}" for k in sorted(expected.keys() - got.keys())]
    problems += [f"unexpected tensor {k!r}" for k in sorted(got.keys() - expected.keys())]
    for k in sorted(expected.keys() & got.keys()):
        e, g = expected[k], got[k]
        if e.shape != g.shape or e.dtype != g.dtype:
            problems.append(f"{k}: expected {tuple(e.shape)} {e.dtype}, got {tuple(g.shape)} {g.dtype}")
    return problems


def read_verified(
    path: Path, sha256: str, error: type[Exception] = CheckpointError
) -> dict[str, torch.Tensor]:
    """Read a safetensors file once, check its hash against the metadata, then parse those same bytes."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise error(f"cannot read {path}: {e}") from e
    actual = hashlib.sha256(data).hexdigest()
    if actual != sha256:
        raise error(f"{path} is corrupt or was modified: its sha256 is {actual}, its metadata says {sha256}")
    try:
        return safetensors.torch.load(data)
    except (SafetensorError, ValueError) as e:
        raise error(f"{path} is not a valid safetensors file: {e}") from e


def write_atomically(directory: Path, files: Mapping[str, bytes]) -> Path:
    """Create `directory` holding `files`, or nothing: write under a hidden temp name, fsync, rename."""
    if directory.exists():
        raise FileExistsError(f"{directory} already exists; checkpoints are immutable")
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = directory.parent / f".{directory.name}.tmp-{uuid.uuid4().hex}"
    tmp.mkdir()
    try:
        for name, data in files.items():
            write_durable(tmp / name, data)
        os.rename(tmp, directory)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    fsync_dir(directory.parent)  # make the rename itself durable
    return directory


def replace_file_atomically(path: Path, data: bytes) -> Path:
    """Replace the file at `path` with `data`: a crash leaves the old or the new content, never a mix."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex}")
    try:
        write_durable(tmp, data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
    return path


def json_bytes(obj: Any) -> bytes:
    return (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode()


def jsonable(d: dict) -> dict:
    """`d` as plain JSON types (paths and other objects as their str), for metadata and reports."""
    return json.loads(json.dumps(d, default=str))


def robocoach_version() -> str:
    try:
        return metadata.version("robocoach_skills")
    except metadata.PackageNotFoundError:
        return "unknown"

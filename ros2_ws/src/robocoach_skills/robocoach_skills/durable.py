"""Durable writes, shared by the episode store and the checkpoints: data and directory entries fsynced.

Torch-free on purpose: the episode store (a format other tools read) needs it too.
"""

from __future__ import annotations

import os
from pathlib import Path


def write_durable(path: Path, data: bytes) -> None:
    """Write `data` to `path` and fsync it before returning."""
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def fsync_dir(path: Path) -> None:
    """Make a rename or file creation inside `path` durable (the directory entry itself is data)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

"""Device selection, in one place for every trainer and node: CUDA when present, else CPU.

Override with the ROBOCOACH_DEVICE environment variable (e.g. "cpu", "cuda:1"). Under torchrun,
each process takes the GPU of its LOCAL_RANK.
"""

from __future__ import annotations

import os

import torch


def select_device(preferred: str | None = None) -> torch.device:
    choice = preferred or os.environ.get("ROBOCOACH_DEVICE")
    if choice:
        return torch.device(choice)
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    return torch.device("cpu")

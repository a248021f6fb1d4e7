"""Device selection, in one place for every trainer and node: CUDA when present, else CPU.

`fast_dtype` says which reduced precision that device computes natively (used where a little
precision buys a lot of speed, e.g. rendering imagined frames).

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


def fast_dtype(device: torch.device) -> torch.dtype | None:
    """bfloat16 where `device` computes it natively (CUDA with bf16, CPUs with AVX512-BF16 or AMX), else None.

    Where bf16 would be emulated it is slower than float32, so None means "stay in float32".
    """
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else None
    if device.type == "cpu" and (torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()):
        return torch.bfloat16
    return None

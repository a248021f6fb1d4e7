"""Fixtures for the experiment tests; the episode helpers of tests/data are reused."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

DATA_HELPERS = Path(__file__).resolve().parents[1] / "data"  # episode_factory.py
if str(DATA_HELPERS) not in sys.path:
    sys.path.append(str(DATA_HELPERS))

torch.set_num_threads(1)  # the CPUs are shared

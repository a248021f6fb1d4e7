"""Fixtures for the coach tests; the episode and expert helpers of tests/data and tests/experts are reused."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

TESTS = Path(__file__).resolve().parents[1]
for helpers in ("data", "experts"):  # episode_factory.py, expert_helpers.py
    if str(TESTS / helpers) not in sys.path:
        sys.path.append(str(TESTS / helpers))

torch.set_num_threads(1)  # the CPUs are shared

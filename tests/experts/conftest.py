"""Fixtures for the expert tests (helpers live in expert_helpers.py)."""

from __future__ import annotations

import pytest
import torch
from expert_helpers import TINY

from robocoach_skills.experts import ExpertConfig

torch.set_num_threads(1)  # the CPUs are shared; one thread also avoids OpenMP spin-waits


@pytest.fixture
def config() -> ExpertConfig:
    """A tiny expert (32x32 frames, two convs, K=4): every test runs in about a second."""
    return ExpertConfig(**TINY)

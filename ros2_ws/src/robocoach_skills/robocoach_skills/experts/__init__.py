"""Skill experts: a shared backbone with per-skill LoRA adapters and heads, their baselines,
versioned adapter artifacts, and training. Pure torch: no rclpy here (see design.md).

Checks: PYTHONPATH=ros2_ws/src/robocoach_skills .venv/bin/python -m pytest tests/experts -q
"""

from robocoach_skills.experts.artifacts import (
    AdapterLoadError,
    AdapterMeta,
    ArtifactLoadError,
    load_adapter,
    load_backbone,
    save_adapter,
    save_backbone,
)
from robocoach_skills.experts.baselines import EndToEndPolicy, SharedAdapterPolicy, SkillConditionedPolicy
from robocoach_skills.experts.config import ExpertConfig
from robocoach_skills.experts.model import ChunkPolicy, ExpertLibrary, UnknownSkillError
from robocoach_skills.experts.registry import AdapterInfo, AdapterRegistry
from robocoach_skills.experts.train import pretrain, save_loss_curve, update_adapter

__all__ = [
    "AdapterInfo",
    "AdapterLoadError",
    "AdapterMeta",
    "AdapterRegistry",
    "ArtifactLoadError",
    "ChunkPolicy",
    "EndToEndPolicy",
    "ExpertConfig",
    "ExpertLibrary",
    "SharedAdapterPolicy",
    "SkillConditionedPolicy",
    "UnknownSkillError",
    "load_adapter",
    "load_backbone",
    "pretrain",
    "save_adapter",
    "save_backbone",
    "save_loss_curve",
    "update_adapter",
]

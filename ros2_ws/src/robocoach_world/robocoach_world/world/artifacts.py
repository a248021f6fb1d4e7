"""CoachWorld checkpoints: `robocoach_skills.checkpoint` directories of kind "coachworld".

meta.json carries the model version, the full `WorldConfig`, and whatever the trainer adds
(training config, step, metrics, the held-out split). Loading refuses, with `CheckpointError`
naming the reason: corrupt or tampered weights, another model's checkpoint, another model
version, a config this code cannot build, or tensors that do not fit the built model.

    save_world(Path("runs/world/checkpoint"), model, {"step": 1500, "metrics": {...}})
    model, meta = load_world(Path("runs/world/checkpoint"))
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from robocoach_skills.checkpoint import CheckpointError, check_fits, load_checkpoint, save_checkpoint
from robocoach_skills.device import select_device
from robocoach_world.world.model import CoachWorld, WorldConfig

KIND = "coachworld"
CHECKPOINT_DIR = "checkpoint"  # where world.train writes the checkpoint inside its --out directory
MODEL_VERSION = 2  # bump when the architecture changes so that old weights must not be loaded


def save_world(directory: Path, model: CoachWorld, extra: dict[str, Any]) -> Path:
    """Write `model` (weights + config + version) and `extra` metadata as a new checkpoint."""
    meta = {**extra, "kind": KIND, "model_version": MODEL_VERSION, "world_config": asdict(model.config)}
    return save_checkpoint(directory, model.state_dict(), meta)


def load_world(directory: Path, device: str | torch.device | None = None) -> tuple[CoachWorld, dict]:
    """(model in eval mode on `device` (default: select_device()), meta) from a checkpoint directory."""
    tensors, meta = load_checkpoint(Path(directory), kind=KIND)
    if meta.get("model_version") != MODEL_VERSION:
        raise CheckpointError(
            f"{directory} holds CoachWorld version {meta.get('model_version')!r}; "
            f"this code builds {MODEL_VERSION}"
        )
    try:
        config = WorldConfig.from_dict(meta["world_config"])
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"{directory} has an unusable world_config: {e}") from e
    model = CoachWorld(config)
    check_fits(Path(directory), model.state_dict(), tensors)
    model.load_state_dict(tensors)
    device = torch.device(device) if device is not None else select_device()
    return model.to(device).eval(), meta


def checkpoint_in(directory: Path) -> Path:
    """The checkpoint of a training run directory (`<out>/checkpoint`), or `directory` itself."""
    nested = Path(directory) / CHECKPOINT_DIR
    return nested if nested.is_dir() else Path(directory)

"""Synthetic batches that follow the episode-dataset contract, and small tensor helpers."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from robocoach_skills.action_contract import ACTION_DIM, channel_mask, native_dim, pad, robot_id
from robocoach_skills.constants import SUBTASK_ARGUMENTS
from robocoach_skills.experts import ExpertConfig

TINY = {
    "image_size": 32,
    "conv_channels": (8, 16),
    "norm_groups": 4,
    "proprio_hidden": 32,
    "robot_embed_dim": 4,
    "embed_dim": 64,
    "head_hidden": 64,
    "chunk_len": 4,
    "lora_layers": ("conv1", "fuse", "trunk"),
    "shift_pixels": 0,  # deterministic losses: tests compare them across calls
    "done_pos_weight": 5.0,  # synthetic done labels are rare (DONE_ABOVE: ~10% positives)
}
STEP_DELTA = 0.3  # how far the synthetic policy moves over one chunk [rad]
DONE_ABOVE = 0.8  # done where proprio[0] exceeds this: ~10% positives, rare like real subtask ends


def target_map(seed: int) -> np.ndarray:
    """A fixed random (D, D) matrix: the synthetic skill moves joints along tanh(proprio @ M)."""
    return np.random.default_rng(seed).normal(size=(ACTION_DIM, ACTION_DIM)).astype(np.float32)


def synthetic_batch(
    config: ExpertConfig,
    robots: Sequence[str],
    seed: int = 0,
    skills: Sequence[str] | None = None,
    map_seed: int = 1234,
) -> dict:
    """One row per entry of `robots`; the actions are a fixed smooth function of the proprio.

    Chunk step k moves the arm's real channels by (k+1)/K * STEP_DELTA * tanh(proprio @ M) (M drawn
    from `map_seed`: a different seed is a different skill); padded
    channels stay 0 as action_contract.pad leaves them; done = proprio[0] > DONE_ABOVE; the last row's
    chunk runs past the episode end halfway (action_mask 0 there).
    """
    rng = np.random.default_rng(seed)
    k, s = config.chunk_len, config.image_size
    proprio = np.stack([pad(r, rng.uniform(-1, 1, native_dim(r)).astype(np.float32)) for r in robots])
    motion = np.tanh(
        proprio @ target_map(map_seed) / np.sqrt(ACTION_DIM)
    )  # (B, D), mostly in the linear range
    steps = (np.arange(1, k + 1, dtype=np.float32) / k)[None, :, None]  # (1, K, 1)
    chunk = (proprio[:, None, :] + STEP_DELTA * steps * motion[:, None, :]).astype(np.float32)  # (B, K, D)
    chunk = np.stack([pad(r, c[:, channel_mask(r)]) for r, c in zip(robots, chunk, strict=True)])
    mask = np.ones((len(robots), k), dtype=np.float32)
    mask[-1, k // 2 :] = 0.0
    batch = {
        "image": torch.from_numpy(rng.uniform(0, 1, (len(robots), 3, s, s)).astype(np.float32)),
        "subtask_start_image": torch.from_numpy(rng.uniform(0, 1, (len(robots), 3, s, s)).astype(np.float32)),
        "proprio": torch.from_numpy(proprio),
        "action_chunk": torch.from_numpy(chunk),
        "action_mask": torch.from_numpy(mask),
        "done": torch.from_numpy((proprio[:, 0] > DONE_ABOVE).astype(np.float32)),
        "robot_id": torch.tensor([robot_id(r) for r in robots]),
        "arguments": torch.from_numpy(rng.integers(0, len(SUBTASK_ARGUMENTS), (len(robots), 2))),
    }
    if skills is not None:
        batch["skill"] = list(skills)
    return batch


def clone_state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A CPU copy of every parameter and buffer (compare with `cpu_state`, on any device)."""
    return {k: v.detach().cpu().clone() for k, v in module.state_dict().items()}


def cpu_state(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.detach().cpu() for k, v in tensors.items()}


def randomize_(params, seed: int = 0) -> None:
    """Overwrite parameters with N(0, 0.3) noise (so zero-initialised layers stop hiding effects)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in params:
            p.copy_(torch.randn(p.shape, generator=generator) * 0.3)

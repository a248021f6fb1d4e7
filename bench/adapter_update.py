"""Wall time of one adapter update read from an episode store, as the coach runs it, at two cache sizes,
and what its dense steps cost against full ones.

The coach's update (`coach.improve.improve_experts`) draws shuffled batches through `EpisodeDataset`,
which decodes whole episodes through a per-process cache. This records scripted pick demos into a
temporary store (or reads `--store`) and times the same update twice, side by side: with the cache
that held 8 episodes before session 13 (`--small-cache-mb`, 8 x 0.75 MB) and with the default. Then,
also side by side, `steps` full steps against one full step followed by `steps` dense steps of the same
batch size (`update_adapter(dense_steps=...)`: the vision computed once per frame, then only the dense
layers and head), and of ImproveConfig's dense batch size.

    source env.sh && python bench/adapter_update.py                      # 40 fresh demos, 200 steps
    python bench/adapter_update.py --store runs/s12/probe_pick_novision_100/demos --steps 300
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import tyro
from torch.utils.data import DataLoader

from robocoach_skills.data.dataset import DatasetConfig, EpisodeDataset
from robocoach_skills.data.store import EpisodeStore, StoreInfo
from robocoach_skills.experts import ExpertConfig, ExpertLibrary
from robocoach_skills.experts.train import update_adapter
from robocoach_skills.operator import ScriptedOperator
from robocoach_skills.sim.scene import SceneConfig, SimScene
from robocoach_skills.tasks import get_composition
from robocoach_world.coach.improve import ImproveConfig


@dataclass
class Args:
    store: Path | None = None  # an existing demo store; None = record `demos` fresh ones
    demos: int = 40  # scripted franka pick demos recorded when no store is given
    steps: int = 200  # optimiser steps of each timed update
    batch_size: int = 64  # as ImproveConfig
    small_cache_mb: float = 6.0  # the old cache: 8 episodes of 0.75 MB
    threads: int = 1  # torch intra-op threads
    seed: int = 0


def record(root: Path, demos: int) -> EpisodeStore:
    scene = SimScene(SceneConfig(robot="franka"))
    info = StoreInfo(fps=scene.config.policy_hz, image_size=(scene.config.image_size,) * 2)
    store = EpisodeStore.create(root, info)
    composition = get_composition("franka", "pick_place_bin")
    operator = ScriptedOperator()
    for seed in range(demos):
        store.add(operator.demo_subtask(scene, composition, 0, seed))
    return store


def update_seconds(
    store: EpisodeStore, cache_mb: float, args: Args, steps: int | None = None, dense_batch: int = 0
) -> float:
    """One update's wall time: `steps` full steps (default args.steps), or with `dense_batch` one full
    step and args.steps dense steps of that batch size."""
    library = ExpertLibrary(ExpertConfig(), skills=("pick",))
    dataset = EpisodeDataset(
        store, DatasetConfig(chunk_len=library.config.chunk_len, pad_channels=True, cache_mb=cache_mb)
    )
    loader = DataLoader(
        dataset, batch_size=args.batch_size, shuffle=True, generator=torch.Generator().manual_seed(args.seed)
    )
    start = time.perf_counter()
    dense = dict(dense_steps=args.steps, dense_batch_size=dense_batch) if dense_batch else {}
    update_adapter(library, "pick", loader, steps or args.steps, progress=False, **dense)
    return time.perf_counter() - start


def main(args: Args) -> None:
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        store = EpisodeStore(args.store) if args.store else record(Path(tmp) / "demos", args.demos)
        print(f"adapter update from {len(store)} episodes: {args.steps} steps x batch {args.batch_size}")
        small = update_seconds(store, args.small_cache_mb, args)
        default = update_seconds(store, DatasetConfig.cache_mb, args)
        same_batch = update_seconds(store, DatasetConfig.cache_mb, args, 1, args.batch_size)
        improve = ImproveConfig.dense_batch_size
        dense_batch = update_seconds(store, DatasetConfig.cache_mb, args, 1, improve)
    print(f"  cache {args.small_cache_mb:7.1f} MB: {small:6.1f} s")
    print(f"  cache {DatasetConfig.cache_mb:7.1f} MB: {default:6.1f} s  ({small / default:.1f}x faster)")
    print(
        f"  1 full + {args.steps} dense steps x batch {args.batch_size}: {same_batch:6.1f} s  "
        f"({default / same_batch:.1f}x faster than {args.steps} full steps)"
    )
    print(
        f"  1 full + {args.steps} dense steps x batch {improve}: {dense_batch:6.1f} s  "
        f"({default / dense_batch:.1f}x faster than {args.steps} full steps of {args.batch_size})"
    )


if __name__ == "__main__":
    main(tyro.cli(Args))

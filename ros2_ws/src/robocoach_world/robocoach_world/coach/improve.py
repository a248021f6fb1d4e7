"""Improve, part 2: retrain only the requested experts' adapters on their new demos plus a replay sample.

For each skill that received demos this round (all requests sharing the expert pooled), the update
trains `update_adapter` on the new demos mixed with a seeded sample of the skill's older demos
(`replay_ratio` x as many episodes, fewer if fewer exist, taken in turn from each of the skill's
variants, e.g. each button) so the adapter does not forget the situations it already handled, then
publishes a new version (parent: the active one). Every other
adapter, and the backbone, are untouched.

Publishing is exactly-once per (skill, round): the published metrics carry `coach/round`, so after a
crash between publishing and recording it in the coach state, calling again reloads that version
instead of training a second one.

    updates = improve_experts(library, registry, store, state.demos_by_skill(), state.round)
    for u in updates:
        state.record_adapter(u.skill, u.version)
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import DataLoader

from robocoach_skills.data.dataset import DatasetConfig, EpisodeDataset
from robocoach_skills.data.store import EpisodeStore
from robocoach_skills.experts.model import ExpertLibrary
from robocoach_skills.experts.registry import AdapterRegistry
from robocoach_skills.experts.train import update_adapter

ROUND_METRIC = "coach/round"  # in the published metrics: which coach round produced the version
RUN_METRIC = "coach/run"  # ... and which coach run (its 8-hex-digit run id as a number)


@dataclass(frozen=True)
class ImproveConfig:
    steps: int = 300  # optimiser steps per retrained skill, vision (conv LoRA) included
    batch_size: int = 64  # samples per step
    # ... then steps on the vision those left (train.update_adapter): 300 steps alone underfit a 50-demo
    # push update (0 of 16 pushed; 3000 full steps: 10 of 16, docs/bootstrap.md session 39)
    dense_steps: int = 3000
    dense_batch_size: int = 256
    replay_ratio: float = 0.5  # older demos of the skill mixed in, per new demo (episodes)
    seed: int = 0  # replay sample and data order
    num_workers: int = 0  # DataLoader workers

    def __post_init__(self) -> None:
        if self.steps < 1 or self.batch_size < 1 or self.dense_steps < 0 or self.dense_batch_size < 1:
            raise ValueError(f"ImproveConfig: steps and batch sizes must be >= 1, dense_steps >= 0: {self}")
        if self.replay_ratio < 0:
            raise ValueError(f"ImproveConfig.replay_ratio must be >= 0, got {self.replay_ratio!r}")


@dataclass(frozen=True)
class AdapterUpdate:
    skill: str
    version: int  # the published version, now active
    parent_version: int | None
    new_episode_ids: tuple[str, ...]
    replay_episode_ids: tuple[str, ...]
    metrics: dict[str, float]


def replay_sample(
    store: EpisodeStore, skill: str, exclude: Sequence[str], n: int, seed: int, robots: set[str] | None = None
) -> list[str]:
    """`n` (or all, if fewer) successful demos of `skill` not in `exclude` (and on one of `robots`, when
    given: an arm coached on its own replays its own demos), drawn without replacement, in store order.

    The draw goes round-robin over the skill's variants (the demo's arm, the task and place in it that
    the demo started from, and the skill's arguments, e.g. each button), seeded within each: rounds
    that ask for one variant fill the store with its demos, and a draw from the whole pool would leave
    the others out of the replay (docs/results.md: session 28, where 75 red-button press demos took the
    green press away; session 39, where picks after a press took the picks from home away)."""
    skip = set(exclude)
    pool, variants = [], {}
    for m in store.iter_meta(kind="demo", skill=skill, success=True):
        if m.episode_id not in skip and (robots is None or m.robot in robots):
            args = (str(s) for s in m.composition.subtasks if s.skill == skill)
            variant = ";".join([m.robot, m.composition.name, *args])
            variants.setdefault(variant, []).append(m.episode_id)
            pool.append(m.episode_id)
    turns = seeded_sample(sorted(variants), len(variants), seed, skill, shuffle=True)  # who goes first
    queues = [seeded_sample(variants[v], len(variants[v]), seed, f"{skill}/{v}", shuffle=True) for v in turns]
    order = [ids[k] for k in range(max(map(len, queues), default=0)) for ids in queues if k < len(ids)]
    chosen = set(order[:n])
    return [i for i in pool if i in chosen]


def seeded_sample(pool: Sequence[str], n: int, seed: int, key: str, shuffle: bool = False) -> list[str]:
    """`n` (or all, if fewer) of `pool` without replacement, in pool order (`shuffle`: in the drawn
    order); the draw depends only on (seed, key), so a resumed run draws the same replay again."""
    rng = np.random.default_rng((seed, zlib.crc32(key.encode())))
    chosen = rng.choice(len(pool), size=min(n, len(pool)), replace=False)
    return [pool[i] for i in (chosen if shuffle else sorted(chosen))]


def improve_experts(
    library: ExpertLibrary,
    registry: AdapterRegistry,
    store: EpisodeStore,
    demos: Mapping[str, Sequence[str]],
    round_index: int,
    config: ImproveConfig | None = None,
    progress: bool = False,
    run_id: str = "0",
) -> list[AdapterUpdate]:
    """Retrain and publish the adapter of every skill in `demos` (skill -> new demo episode ids).

    A skill whose active version this run (`run_id`, hex) already published in this round is
    reloaded, not retrained: that is a coach resuming after a crash.
    """
    run = float(int(run_id, 16))
    config = config or ImproveConfig()
    updates = []
    for skill, new_ids in sorted(demos.items()):
        if not new_ids:
            raise ValueError(f"no new demos for skill {skill!r}")
        missing = sorted(set(new_ids) - set(store.ids()))
        if missing:
            raise ValueError(f"episodes {missing} for skill {skill!r} are not in {store.root}")
        n_replay = round(config.replay_ratio * len(new_ids))
        robots = {store.meta(i).robot for i in new_ids}
        replay = replay_sample(store, skill, new_ids, n_replay, config.seed + round_index, robots)
        active = registry.active_version(skill)
        parent = registry.meta(skill, active) if active is not None else None
        if (
            parent is not None
            and parent.metrics.get(ROUND_METRIC) == round_index
            and parent.metrics.get(RUN_METRIC) == run
        ):
            registry.activate(library, skill, active)  # published before a crash: load it, do not retrain
            updates.append(
                AdapterUpdate(
                    skill, active, parent.parent_version, tuple(new_ids), tuple(replay), parent.metrics
                )
            )
            continue
        ids = (*new_ids, *replay)
        dataset = EpisodeDataset(
            store, DatasetConfig(chunk_len=library.config.chunk_len, pad_channels=True, episode_ids=ids)
        )
        missing = sorted(set(ids) - set(dataset.episode_ids))
        if missing:
            raise ValueError(f"episodes {missing} for skill {skill!r} are not in {store.root}")
        loader = DataLoader(
            dataset,
            batch_size=config.batch_size,
            shuffle=True,
            num_workers=config.num_workers,
            generator=torch.Generator().manual_seed(config.seed + round_index),
        )
        metrics, _ = update_adapter(
            library, skill, loader, config.steps, progress=progress, dense_steps=config.dense_steps,
            dense_batch_size=config.dense_batch_size, seed=config.seed + round_index,
        )  # fmt: skip
        metrics = {
            **metrics,
            ROUND_METRIC: float(round_index),
            RUN_METRIC: run,
            "coach/new_demos": float(len(new_ids)),
            "coach/replay_demos": float(len(replay)),
        }
        meta = {
            "demos_used": (parent.demos_used if parent else 0) + len(new_ids),
            "metrics": metrics,
            "robot": robots.pop() if len(robots) == 1 else "",
        }
        version = registry.publish(library, skill, meta)
        updates.append(AdapterUpdate(skill, version, active, tuple(new_ids), tuple(replay), metrics))
    return updates

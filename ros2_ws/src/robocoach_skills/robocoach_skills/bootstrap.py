"""Bootstrap: a small per-skill budget of subtask demos from the scripted operator, and the
initial experts trained on them.

The experts start from these demos, so the budget is small on purpose (default 10 per skill and arm):
starting success must leave room for coaching. Demos are spread over every (composition, subtask)
use of a skill, from seeded initial states; the operator's failed attempts are discarded the way a
person at the demo station discards a bad take, and counted in the summary.

    store = EpisodeStore.create(root, StoreInfo(fps=10.0, image_size=(64, 64)), exist_ok=True)
    summary = collect_bootstrap_demos("franka", store, BootstrapConfig(demos_per_skill=10))
    library, registry, _, losses = train_bootstrap_experts(store, root / "experts", ExpertTrainingConfig())
    deadlines = calibrate_deadlines(store)  # skill -> steps, for RouterConfig.skill_deadline_steps
"""

from __future__ import annotations

import itertools
import json
import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader
from tqdm import tqdm

from robocoach_skills.data.dataset import DatasetConfig, EpisodeDataset
from robocoach_skills.data.store import EpisodeStore
from robocoach_skills.experts import ExpertConfig, ExpertLibrary
from robocoach_skills.experts.artifacts import load_backbone, save_backbone
from robocoach_skills.experts.perception import PerceptionConfig, pretrain_vision, render_landmark_frames
from robocoach_skills.experts.registry import AdapterRegistry
from robocoach_skills.experts.train import pretrain
from robocoach_skills.operator import OperatorConfig, ScriptedOperator
from robocoach_skills.sim.scene import SceneConfig, SimScene
from robocoach_skills.tasks import skill_instances

SEED_STRIDE = 1000  # bootstrap seeds are seed * SEED_STRIDE + k, apart from evaluation seeds

# Layout of an experts directory: what executors and the coach load.
BACKBONE_DIR = "backbone"  # the shared backbone checkpoint
ADAPTERS_DIR = "adapters"  # the AdapterRegistry: versions per skill
DEADLINES_FILE = "deadlines.json"  # skill -> subtask deadline [policy steps]


@dataclass
class BootstrapConfig:
    """How many bootstrap demos to record, and from which initial states."""

    demos_per_skill: int = 10  # accepted subtask demos per skill and arm
    max_takes_per_demo: int = 3  # takes the operator may discard before a slot is left empty
    image_size: int = 64  # camera edge [px]
    seed: int = 0  # base seed of the initial states and of the operator

    def __post_init__(self) -> None:
        if self.demos_per_skill < 1:
            raise ValueError(f"BootstrapConfig.demos_per_skill must be >= 1, got {self.demos_per_skill}")
        if self.max_takes_per_demo < 1:
            raise ValueError(
                f"BootstrapConfig.max_takes_per_demo must be >= 1, got {self.max_takes_per_demo}"
            )


@dataclass
class SkillDemoSummary:
    skill: str
    accepted: int  # demos written to the store
    discarded: int  # takes that failed and were thrown away
    mean_length: float  # policy steps per accepted demo
    episode_ids: list[str]


def collect_bootstrap_demos(
    robot: str, store: EpisodeStore, config: BootstrapConfig, show_progress: bool = True
) -> dict[str, SkillDemoSummary]:
    """Record `demos_per_skill` accepted demos of every skill of `robot`'s training tasks into `store`."""
    scene = SimScene(SceneConfig(robot=robot, image_size=config.image_size))
    operator = ScriptedOperator(OperatorConfig(seed=config.seed))
    uses = skill_instances(robot)
    summary: dict[str, SkillDemoSummary] = {}
    bar = tqdm(
        total=len(uses) * config.demos_per_skill, desc=f"bootstrap demos {robot}", disable=not show_progress
    )
    seeds = itertools.count(config.seed * SEED_STRIDE + 1)
    for skill, instances in uses.items():
        ids, lengths, discarded = [], [], 0
        for k in range(config.demos_per_skill):
            composition, index = instances[k % len(instances)]
            episode, failed = operator.successful_demo(
                scene, composition, index, seeds, config.max_takes_per_demo
            )
            discarded += failed
            if episode is not None:
                ids.append(store.add(episode))
                lengths.append(len(episode))
            bar.update()
        summary[skill] = SkillDemoSummary(skill, len(ids), discarded, float(np.mean(lengths or [0])), ids)
    bar.close()
    scene.close()
    return summary


@dataclass
class ExpertTrainingConfig:
    """Pretraining of the backbone and every skill's adapter and head on the bootstrap demos."""

    steps: int = 1500  # optimiser steps
    batch_size: int = 64  # samples per step, both arms mixed
    num_workers: int = 0  # DataLoader workers (0: load in the training process)
    seed: int = 0  # model initialisation and data order
    expert: ExpertConfig = field(default_factory=ExpertConfig)  # model and optimiser
    # The perception prior trained into the backbone's keypoints before the demos are (None: none).
    perception: PerceptionConfig | None = field(default_factory=PerceptionConfig)
    # With a perception prior, the demos train everything but the vision layers and every skill's LoRA on
    # them (those stay at identity until the skill's first adapter update).
    freeze_vision: bool = True

    def __post_init__(self) -> None:
        if self.steps < 1 or self.batch_size < 1:
            raise ValueError(f"steps and batch_size must be >= 1, got {self.steps}, {self.batch_size}")


def train_bootstrap_experts(
    store: EpisodeStore, root: Path, config: ExpertTrainingConfig, show_progress: bool = True
) -> tuple[ExpertLibrary, AdapterRegistry, dict[str, float], list[float]]:
    """Pretrain one expert library for both arms on every demo in `store`.

    Writes the backbone, version 0 of every skill's adapter, and the subtask deadlines calibrated on
    the same demos (see BACKBONE_DIR, ADAPTERS_DIR, DEADLINES_FILE).
    """
    dataset = EpisodeDataset(
        store, DatasetConfig(chunk_len=config.expert.chunk_len, kind="demo", success=True, pad_channels=True)
    )
    demos_per_skill = _demos_per_skill(store)
    torch.manual_seed(config.seed)
    library = ExpertLibrary(config.expert, skills=sorted(demos_per_skill))
    metrics: dict[str, float] = {}
    frozen: list[torch.nn.Parameter] = []
    if config.perception is not None:
        size = store.info.image_size[0]
        robots = sorted({meta.robot for meta in store.iter_meta(kind="demo")})
        frames = [render_landmark_frames(r, config.perception, size, show_progress) for r in robots]
        metrics, _ = pretrain_vision(library.backbone, frames, config.perception, show_progress)
        if config.freeze_vision:
            frozen = [*library.backbone.vision_parameters(), *library.vision_adapter_parameters()]
    loader = DataLoader(
        dataset,
        batch_size=config.batch_size,
        shuffle=True,
        num_workers=config.num_workers,
        generator=torch.Generator().manual_seed(config.seed),
    )
    policy_metrics, losses = pretrain(library, loader, config.steps, progress=show_progress, frozen=frozen)
    metrics |= policy_metrics
    save_backbone(library, root / BACKBONE_DIR, extra={"metrics": metrics})
    registry = AdapterRegistry(root / ADAPTERS_DIR)
    for skill in library.skills:
        registry.publish(library, skill, {"demos_used": demos_per_skill[skill], "metrics": metrics})
    (root / DEADLINES_FILE).write_text(json.dumps(calibrate_deadlines(store), indent=2))
    return library, registry, metrics, losses


def load_experts(
    root: Path, versions: Mapping[str, int] | None = None
) -> tuple[ExpertLibrary, AdapterRegistry, dict[str, int], dict[str, int]]:
    """(library with every skill's active adapter, registry, active versions, deadlines) from `root`;
    with `versions` (skill -> version), those adapters instead, ACTIVE left as it is.

    Raises ArtifactLoadError / AdapterLoadError with the offending path when something is corrupt.
    """
    library = load_backbone(root / BACKBONE_DIR)
    registry = AdapterRegistry(root / ADAPTERS_DIR)
    for skill in registry.skills():
        library.add_skill(skill)
    if versions is None:
        versions = registry.restore(library)
    else:
        versions = dict(versions)
        for skill, version in versions.items():
            registry.load(library, skill, version)
    deadlines_file = root / DEADLINES_FILE
    deadlines = json.loads(deadlines_file.read_text()) if deadlines_file.exists() else {}
    return library, registry, versions, deadlines


def _demos_per_skill(store: EpisodeStore) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for meta in store.iter_meta(kind="demo", success=True):
        for skill in {s.skill for s in meta.composition.subtasks}:
            counts[skill] += 1
    return dict(counts)


def calibrate_deadlines(store: EpisodeStore, factor: float = 1.5, quantile: float = 0.9) -> dict[str, int]:
    """Per-skill subtask deadline [policy steps]: `factor` x the `quantile` of demonstrated durations.

    A skill that takes the operator 60 steps should not time out at 40 nor wait 400; demos are the
    only durations known before any expert runs. The progress judge recalibrates them later.
    """
    durations: dict[str, list[int]] = defaultdict(list)
    for meta in store.iter_meta(kind="demo", success=True):
        if len(meta.composition.subtasks) == 1:  # a subtask demo: no need to load its frames
            durations[meta.composition.subtasks[0].skill].append(meta.length)
            continue
        episode = store.get(meta.episode_id)
        for index, subtask in enumerate(meta.composition.subtasks):
            durations[subtask.skill].append(int(np.sum(episode.subtask_index == index)))
    return {skill: math.ceil(factor * float(np.quantile(d, quantile))) for skill, d in durations.items()}

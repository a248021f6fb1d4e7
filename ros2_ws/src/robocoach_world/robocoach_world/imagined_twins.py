"""Imagined twins of recorded expert rollouts, and the per-skill calibration fitted on them.

A recorded rollout says what the experts did on the simulator (its ground-truth first failure); its
twins are the same experts, at the versions the rollout recorded, imagined in CoachWorld from the
rollout's first frame and judged as imagination always is. Per skill, completed where reached on both
sides gives the `ImaginationCalibration` (robocoach_world.calibration), which is only honest where no
model trained on the rollouts: the offboard stage's calibration rollouts.

    calibration, rows = fit_calibration(run / "experts", run / "world", run / "judge", [store],
                                        ImaginationConfig(), rollouts_per_state=2)
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
from tqdm import tqdm

from robocoach_skills.bootstrap import load_experts
from robocoach_skills.data.store import EpisodeMeta, EpisodeStore
from robocoach_skills.device import select_device
from robocoach_skills.tasks import get_composition
from robocoach_world.calibration import ImaginationCalibration
from robocoach_world.fidelity import pair_row, per_skill
from robocoach_world.imagine import ImaginationConfig, imagine_composition
from robocoach_world.judge.detector import judge_detector_args
from robocoach_world.world.artifacts import load_world

log = logging.getLogger("robocoach.calibration")
TWINS_PER_ROLLOUT = 2  # imagined twins of each recorded rollout, by default


def recorded_versions(rollouts: Sequence[EpisodeMeta]) -> dict[str, int]:
    """The expert versions every rollout recorded; raises if two rollouts ran different versions of a skill
    (twins of one library cannot stand for both)."""
    versions: dict[str, int] = {}
    for rollout in rollouts:
        for skill, version in rollout.metadata.get("expert_versions", {}).items():
            if versions.setdefault(skill, int(version)) != int(version):
                raise ValueError(
                    f"rollouts ran {skill} at versions {versions[skill]} and {version}: calibrate on one set"
                )
    return versions


def fit_calibration(
    experts: Path,
    world: Path,
    judge: Path,
    stores: Sequence[Path],
    imagination: ImaginationConfig,
    rollouts_per_state: int = TWINS_PER_ROLLOUT,
    pseudo_trials: float = ImaginationCalibration.pseudo_trials,
) -> tuple[ImaginationCalibration, list[dict]]:
    """(calibration, one fidelity row per (robot, composition)) from the rollouts in `stores`.

    Each composition's rollouts are imagined `rollouts_per_state` times from each one's first frame
    (`imagination.num_rollouts` is set to that); the rows pair them with the rollouts' own outcomes.
    """
    if rollouts_per_state < 1:
        raise ValueError(f"rollouts_per_state must be >= 1, got {rollouts_per_state}")
    groups: dict[tuple[str, str], list[tuple[EpisodeStore, EpisodeMeta]]] = defaultdict(list)
    for root in stores:
        store = EpisodeStore(root)
        for meta in store.iter_meta(kind="rollout"):
            if "first_failed" not in meta.metadata:
                raise ValueError(f"{root}: rollout {meta.episode_id} has no ground-truth first_failed")
            groups[(meta.robot, meta.composition.name)].append((store, meta))
    if not groups:
        raise ValueError(f"no recorded rollouts in {', '.join(map(str, stores))}")
    metas = [meta for group in groups.values() for _, meta in group]
    versions = recorded_versions(metas)
    device = select_device()
    library, _, _, _ = load_experts(experts, versions or None)
    library.to(device)
    world_model, _ = load_world(world, device)
    rows, judges = [], {}
    for (robot, name), group in tqdm(sorted(groups.items()), desc="imagined twins", unit="composition"):
        if robot not in judges:
            judges[robot] = judge_detector_args(judge, robot, device)
        detector_args, deadlines = judges[robot]
        composition = get_composition(robot, name)
        images, proprio = _first_observations(group)
        seeds = [meta.seed for _, meta in group]
        trials = imagine_composition(
            world_model, detector_args["judge"], library, deadlines, composition, images, proprio,
            replace(imagination, num_rollouts=rollouts_per_state * len(group)),
            versions=versions, initial_seeds=seeds, verdict=detector_args["verdict"],
        )  # fmt: skip
        deployed = [int(meta.metadata["first_failed"]) for _, meta in group]
        rows.append(pair_row(composition, seeds, deployed, trials, robot=robot, policy="twins"))
        log.info("twins of %d %s:%s rollouts imagined", len(group), robot, name)
    source = {
        "stores": [str(s) for s in stores],
        "rollouts": len(metas),
        "rollouts_per_state": rollouts_per_state,
        "versions": versions,
    }
    return ImaginationCalibration(per_skill(rows), pseudo_trials, source), rows


def _first_observations(group: Sequence[tuple[EpisodeStore, EpisodeMeta]]) -> tuple[np.ndarray, np.ndarray]:
    """(images (N, H, W, 3), proprio (N, D)): each rollout's first frame, its episode read one at a time."""
    images, proprio = [], []
    for store, meta in group:
        episode = store.get(meta.episode_id)
        images.append(episode.images[0])
        proprio.append(episode.proprio[0])
    return np.stack(images), np.stack(proprio)

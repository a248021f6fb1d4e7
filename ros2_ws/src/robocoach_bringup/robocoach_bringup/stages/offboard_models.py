"""Stage 3 of the main job: the data, CoachWorld and the progress judge the coach imagines with.

1. A corpus per arm: scripted subtask and whole-task demos plus failure-injected ones
   (`robocoach_world.corpus`), so the judge and the world model see failing as well as succeeding;
   and a calibration corpus of clean demos from the corpus's calibration seeds, held out for step 4.
2. Real expert failures: the bootstrap experts deployed on every training composition from rollout
   seeds (never evaluation seeds), recorded frame by frame with ground-truth labels. A second,
   smaller set from other seeds is held out of training for step 4.
   Steps 1-2 run one process per arm, side by side (rendering is the cost), each arm into its own
   stores so that episode order, and with it the judge's validation split, does not depend on timing.
3. CoachWorld and the judge trained on bootstrap demos + corpus + rollouts, the judge also
   (`Profile.judge_on_imagined`) on that CoachWorld's imagined twins of them, so that it reads the
   video it will diagnose in imagination. Without the bootstrap demos the judge saw 10 completed
   picks per arm and never learned one (session 33, docs/world.md).
4. The judge's done threshold and per-(arm, skill) deadlines calibrated on held-out data it never
   trained on, then frozen to <judge>/deadlines.json. The threshold is chosen on the held-out
   rollouts, which switch `Profile.calibration_hold_s` after each true completion
   (`evaluation.HeldTruthDetector`): the expert holds a completed subtask as it does while the
   deployed judge has not confirmed, so a slow confirmation counts as one and an early one as a miss.
   Scripted demos move on at completion and once set the pick's threshold low enough to fire early
   on a third of expert picks. The deadlines come from the rollouts (the experts' own, slower
   subtask times) and the calibration corpus.
5. Per skill, how much more often it completes deployed than imagined, from the same held-out rollouts
   and their imagined twins (`robocoach_world.imagined_twins`), frozen to
   <run>/imagination_calibration.json: fidelity reports imagined success calibrated by it beside the raw.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import torch

from robocoach_bringup.graph import RunPaths
from robocoach_bringup.stages.side_by_side import side_by_side
from robocoach_skills.bootstrap import load_experts
from robocoach_skills.checkpoint import META_FILE, json_bytes, replace_file_atomically
from robocoach_skills.constants import ROBOTS
from robocoach_skills.data.store import INFO_FILE, EpisodeStore, StoreInfo
from robocoach_skills.evaluation import HeldTruthDetector, evaluate, evaluation_seeds
from robocoach_skills.router import Router, RouterConfig
from robocoach_skills.sim.scene import SceneConfig, SimScene
from robocoach_skills.skill_policy import LibraryPolicy
from robocoach_skills.tasks import training_compositions
from robocoach_world.calibration import CALIBRATION_FILE, ImaginationCalibration
from robocoach_world.corpus import CorpusConfig, build_corpus
from robocoach_world.imagine import ImaginationConfig
from robocoach_world.imagined_twins import TWINS_PER_ROLLOUT, fit_calibration
from robocoach_world.judge.checkpoint import DEADLINES_FILE
from robocoach_world.judge.evaluate import SWITCH_TOLERANCE_S, calibrate
from robocoach_world.judge.train import TrainConfig as JudgeTrainConfig
from robocoach_world.judge.train import train as train_judge
from robocoach_world.world.artifacts import CHECKPOINT_DIR
from robocoach_world.world.model import WorldConfig
from robocoach_world.world.train import TrainConfig as WorldTrainConfig
from robocoach_world.world.train import train as train_world

ROLLOUT_SEED_BASE = 900_000  # expert rollouts for training; below evaluation seeds, above corpus splits
CALIBRATION_SEED_BASE = 950_000  # held-out expert rollouts for the judge's calibration
ROLLOUTS, CALIBRATION = "rollouts", "calibration"  # the two sets of recorded expert rollouts
TORCH_THREADS = 1
TWINS_FILE = "imagination_twins.json"  # the calibration's rows: each composition's rollouts and their twins


def run(config, results: dict) -> dict:
    torch.set_num_threads(TORCH_THREADS)
    profile, paths = config.profile, RunPaths(config.output)
    corpus_config = CorpusConfig(
        subtask_demos=profile.corpus_per_use,
        subtask_failures=profile.corpus_per_use,
        composition_demos=profile.corpus_per_composition,
        composition_failures=profile.corpus_per_composition,
        image_size=config.image_size,
    )
    seeds = {
        ROLLOUTS: evaluation_seeds(profile.rollouts_per_composition, base=ROLLOUT_SEED_BASE),
        CALIBRATION: evaluation_seeds(profile.calibration_rollouts, base=CALIBRATION_SEED_BASE),
    }
    hold_steps = round(profile.calibration_hold_s * SceneConfig().policy_hz)
    side_by_side(
        [
            (record_arm, (config.output, robot, corpus_config, seeds, hold_steps, position))
            for position, robot in enumerate(config.robots)
        ]
    )
    corpus = [EpisodeStore(corpus_dir(config.output, r)) for r in config.robots]
    rollouts = [EpisodeStore(rollouts_dir(config.output, r)) for r in config.robots]
    held_out = [EpisodeStore(rollouts_dir(config.output, r, CALIBRATION)) for r in config.robots]
    held_out_demos = [EpisodeStore(corpus_dir(config.output, r, CALIBRATION)) for r in config.robots]

    recorded = [store.root for store in corpus + rollouts]
    stores = [paths.episodes, *recorded]  # the world's data and the judge's
    world_metrics = {}
    if not (paths.world / META_FILE).exists():
        world_config = WorldTrainConfig(
            stores=stores, out=paths.world.parent / "world_run", steps=profile.world_steps,
            world=WorldConfig(image_size=config.image_size),
        )  # fmt: skip
        world_metrics = train_world(world_config)
        (world_config.out / CHECKPOINT_DIR).rename(paths.world)
    judge_metrics = {}
    if not (paths.judge / DEADLINES_FILE).exists():
        judge_config = JudgeTrainConfig(
            stores=stores, out=paths.judge, epochs=profile.judge_epochs, prior=profile.judge_prior,
            world=paths.world if profile.judge_on_imagined else None,
        )  # fmt: skip
        judge, judge_metrics = train_judge(judge_config)
        # successful demos and expert rollouts the judge never trained on
        demos = [store.get(m.episode_id) for store in held_out_demos for m in store.iter_meta(success=True)]
        held = [store.get(i) for store in held_out for i in store.ids()]
        # a confirmation counts up to the rollouts' hold after the truth (the demos' tolerance without them)
        late_s = profile.calibration_hold_s if held else SWITCH_TOLERANCE_S
        deadlines = calibrate(judge, demos + held, judge_config.verdict, rule_videos=held, tolerance_s=late_s)
        deadlines.save(paths.judge / DEADLINES_FILE)
    calibration = None
    twins_of = calibration_stores(config.output, config.robots)
    if twins_of and not (config.output / CALIBRATION_FILE).exists():
        calibration = calibrate_imagination(
            config.output, twins_of, ImaginationConfig(horizon=profile.horizon)
        )
    data = {
        "corpus_episodes": sum(len(store.ids()) for store in corpus),
        "rollout_episodes": sum(len(store.ids()) for store in rollouts),
        "rollout_success": _success(rollouts),
        "calibration_rollouts": sum(len(store.ids()) for store in held_out),
        "calibration_demos": sum(len(store.ids()) for store in held_out_demos),
    }
    return {
        **data,
        "world_metrics": world_metrics,
        "judge_metrics": {k: v for k, v in judge_metrics.items() if not isinstance(v, dict)},
        "imagination_calibration": calibration.to_dict() if calibration else {},
        "markdown": _markdown(data, world_metrics, judge_metrics, calibration),
    }


@dataclass
class CalibrateConfig:
    """Fit the per-skill calibration of imagined outcomes on a run's held-out expert rollouts (step 5)."""

    run: Path = Path("runs/demo")  # a main-job run past stage 3 (`--until offboard_models`)
    robots: tuple[str, ...] = ROBOTS  # arms to calibrate, where the run recorded calibration rollouts
    rollouts_per_state: int = TWINS_PER_ROLLOUT  # imagined twins per recorded rollout
    horizon: int = ImaginationConfig.horizon  # imagined policy steps per trial


def calibrate_imagination(
    output: Path,
    stores: list[Path],
    imagination: ImaginationConfig,
    rollouts_per_state: int = TWINS_PER_ROLLOUT,
) -> ImaginationCalibration:
    """Fit the run's imagination calibration on `stores` (held-out rollouts), write it (and the twins'
    fidelity rows, one per composition, to TWINS_FILE), return it."""
    paths = RunPaths(output)
    calibration, rows = fit_calibration(
        paths.experts, paths.world, paths.judge, stores, imagination, rollouts_per_state
    )
    replace_file_atomically(output / TWINS_FILE, json_bytes(rows))  # per composition, for a closer look
    calibration.save(output / CALIBRATION_FILE)
    return calibration


def calibrate_command(config: CalibrateConfig) -> ImaginationCalibration:
    """`robocoach calibrate-imagination`: step 5 alone, on a run whose stage 3 predates it (or again)."""
    stores = calibration_stores(config.run, config.robots)
    if not stores:
        raise ValueError(
            f"{config.run}: no calibration rollouts for {', '.join(config.robots)} (stage 3 records them)"
        )
    return calibrate_imagination(
        config.run, stores, ImaginationConfig(horizon=config.horizon), config.rollouts_per_state
    )


def calibration_stores(output: Path, robots) -> list[Path]:
    """The arms' held-out expert rollouts that hold episodes: what `calibrate_imagination` fits on."""
    stores = [rollouts_dir(output, robot, CALIBRATION) for robot in robots]
    return [s for s in stores if (s / INFO_FILE).exists() and EpisodeStore(s).ids()]


def corpus_dir(output: Path, robot: str, split: str = "train") -> Path:
    """The arm's training corpus, or its held-out calibration demos (`split` CALIBRATION)."""
    return output / (f"corpus_{robot}" if split == "train" else f"corpus_{split}_{robot}")


def rollouts_dir(output: Path, robot: str, kind: str = ROLLOUTS) -> Path:
    return output / (f"rollouts_{robot}" if kind == ROLLOUTS else f"rollouts_{kind}_{robot}")


def record_arm(
    output: Path,
    robot: str,
    corpus_config: CorpusConfig,
    seeds: dict[str, list[int]],
    hold_steps: int,
    position: int = 0,
) -> None:
    """One arm's corpus, its calibration demos (the corpus's clean episodes from the calibration seeds)
    and both sets of bootstrap-expert rollouts (`seeds`: set -> rollout seeds), each into the arm's own
    store (a worker process). Training rollouts switch by the experts' done heads; calibration
    rollouts `hold_steps` after each true completion.

    A store that already holds episodes is kept: a resumed run does not record it again.
    """
    torch.set_num_threads(TORCH_THREADS)
    size = corpus_config.image_size
    info = StoreInfo(fps=SceneConfig().policy_hz, image_size=(size, size))
    calibration = dataclasses.replace(
        corpus_config, split=CALIBRATION, subtask_failures=0, composition_failures=0
    )
    for split, split_config in (("train", corpus_config), (CALIBRATION, calibration)):
        corpus = EpisodeStore.create(corpus_dir(output, robot, split), info, exist_ok=True)
        if not corpus.ids():
            build_corpus(robot, corpus, split_config, bar_position=position)
    stores = {
        kind: EpisodeStore.create(rollouts_dir(output, robot, kind), info, exist_ok=True) for kind in seeds
    }
    pending = [kind for kind, store in stores.items() if seeds[kind] and not store.ids()]
    if not pending:
        return
    library, _, versions, deadlines = load_experts(RunPaths(output).experts)
    router = Router(LibraryPolicy(library, versions), RouterConfig(skill_deadline_steps=deadlines))
    scene = SimScene(SceneConfig(robot=robot, image_size=size))
    detectors = {ROLLOUTS: router.detector, CALIBRATION: HeldTruthDetector(router.config, scene, hold_steps)}
    try:
        for kind in pending:
            router.detector = detectors[kind]
            for composition in training_compositions(robot):
                evaluate(router, scene, composition, seeds[kind], record_to=stores[kind])
    finally:
        scene.close()


def _success(stores: list[EpisodeStore]) -> float:
    metas = [m for store in stores for m in store.iter_meta()]
    return sum(m.success for m in metas) / len(metas) if metas else float("nan")


def _markdown(data: dict, world: dict, judge: dict, calibration: ImaginationCalibration | None) -> str:
    lines = [
        f"Corpus: {data['corpus_episodes']} scripted episodes (half with injected failures); "
        f"bootstrap-expert rollouts: {data['rollout_episodes']} ({data['rollout_success']:.0%} succeeded), "
        f"{data['calibration_rollouts']} more and {data['calibration_demos']} clean scripted episodes "
        "held out to calibrate the judge.",
    ]
    if world:
        lines.append(
            f"CoachWorld: {', '.join(f'{k} {v:.4g}' for k, v in world.items() if isinstance(v, float))}."
        )
    if judge:
        lines.append(
            f"Judge: validation MAE {judge.get('val_mae', float('nan')):.3f}, "
            f"Spearman {judge.get('val_spearman', float('nan')):.3f}."
        )
    if calibration:
        lines.append(
            "Imagination calibration (held-out rollouts against their imagined twins, completed where "
            "reached; the deployed rate the skill's imagined rate maps to): "
            + "; ".join(calibration.describe())
            + "."
        )
    return "\n\n".join(lines)

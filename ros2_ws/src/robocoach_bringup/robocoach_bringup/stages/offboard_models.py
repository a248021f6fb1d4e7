"""Stage 3 of the main job: the data, CoachWorld and the progress judge the coach imagines with.

1. A corpus per arm: scripted subtask and whole-task demos plus failure-injected ones
   (`robocoach_world.corpus`), so the judge and the world model see failing as well as succeeding.
2. Real expert failures: the bootstrap experts deployed on every training composition from rollout
   seeds (never evaluation seeds), recorded frame by frame with ground-truth labels.
3. CoachWorld trained on bootstrap demos + corpus + rollouts; the judge on corpus + rollouts.
4. Per-(arm, skill) deadlines calibrated with the trained judge on the bootstrap demos (held out from
   its training), then frozen to <judge>/deadlines.json.
"""

from __future__ import annotations

import torch

from robocoach_bringup.graph import RunPaths
from robocoach_skills.bootstrap import load_experts
from robocoach_skills.checkpoint import META_FILE
from robocoach_skills.data.store import EpisodeStore, StoreInfo
from robocoach_skills.evaluation import evaluate, evaluation_seeds
from robocoach_skills.router import Router, RouterConfig
from robocoach_skills.sim.scene import SceneConfig, SimScene
from robocoach_skills.skill_policy import LibraryPolicy
from robocoach_skills.tasks import training_compositions
from robocoach_world.corpus import CorpusConfig, build_corpus
from robocoach_world.judge.checkpoint import DEADLINES_FILE
from robocoach_world.judge.evaluate import calibrate
from robocoach_world.judge.train import TrainConfig as JudgeTrainConfig
from robocoach_world.judge.train import train as train_judge
from robocoach_world.world.artifacts import CHECKPOINT_DIR
from robocoach_world.world.model import WorldConfig
from robocoach_world.world.train import TrainConfig as WorldTrainConfig
from robocoach_world.world.train import train as train_world

ROLLOUT_SEED_BASE = 900_000  # expert rollouts for training; below evaluation seeds, above corpus splits
TORCH_THREADS = 1


def run(config, results: dict) -> dict:
    torch.set_num_threads(TORCH_THREADS)
    profile, paths = config.profile, RunPaths(config.output)
    size = config.image_size
    info = StoreInfo(fps=SceneConfig().policy_hz, image_size=(size, size))
    corpus = EpisodeStore.create(config.output / "corpus", info, exist_ok=True)
    rollouts = EpisodeStore.create(config.output / "rollouts", info, exist_ok=True)
    corpus_config = CorpusConfig(
        subtask_demos=profile.corpus_per_use,
        subtask_failures=profile.corpus_per_use,
        composition_demos=profile.corpus_per_composition,
        composition_failures=profile.corpus_per_composition,
        image_size=size,
    )
    library, _, versions, deadlines = load_experts(paths.experts)
    router = Router(LibraryPolicy(library, versions), RouterConfig(skill_deadline_steps=deadlines))
    seeds = evaluation_seeds(profile.rollouts_per_composition, base=ROLLOUT_SEED_BASE)
    for robot in config.robots:
        if not any(m.robot == robot for m in corpus.iter_meta()):  # a resumed run keeps what it recorded
            build_corpus(robot, corpus, corpus_config)
        if not any(m.robot == robot for m in rollouts.iter_meta()):
            scene = SimScene(SceneConfig(robot=robot, image_size=size))
            for composition in training_compositions(robot):
                evaluate(router, scene, composition, seeds, record_to=rollouts)
            scene.close()

    stores = (paths.episodes, corpus.root, rollouts.root)
    world_metrics = {}
    if not (paths.world / META_FILE).exists():
        world_config = WorldTrainConfig(
            stores=stores, out=paths.world.parent / "world_run", steps=profile.world_steps,
            world=WorldConfig(image_size=size),
        )  # fmt: skip
        world_metrics = train_world(world_config)
        (world_config.out / CHECKPOINT_DIR).rename(paths.world)
    judge_metrics = {}
    if not (paths.judge / DEADLINES_FILE).exists():
        judge_config = JudgeTrainConfig(
            stores=[corpus.root, rollouts.root], out=paths.judge, epochs=profile.judge_epochs
        )
        judge, judge_metrics = train_judge(judge_config)
        bootstrap = EpisodeStore(paths.episodes)  # successful demos the judge never trained on
        demos = [bootstrap.get(m.episode_id) for m in bootstrap.iter_meta(success=True)]
        calibrate(judge, demos, judge_config.verdict).save(paths.judge / DEADLINES_FILE)
    return {
        "corpus_episodes": sum(1 for _ in corpus.iter_meta()),
        "rollout_episodes": sum(1 for _ in rollouts.iter_meta()),
        "rollout_success": _success(rollouts),
        "world_metrics": world_metrics,
        "judge_metrics": {k: v for k, v in judge_metrics.items() if not isinstance(v, dict)},
        "markdown": _markdown(corpus, rollouts, world_metrics, judge_metrics),
    }


def _success(store: EpisodeStore) -> float:
    metas = list(store.iter_meta())
    return sum(m.success for m in metas) / len(metas) if metas else float("nan")


def _markdown(corpus: EpisodeStore, rollouts: EpisodeStore, world: dict, judge: dict) -> str:
    lines = [
        f"Corpus: {sum(1 for _ in corpus.iter_meta())} scripted episodes (half with injected failures); "
        f"bootstrap-expert rollouts: {sum(1 for _ in rollouts.iter_meta())} "
        f"({_success(rollouts):.0%} succeeded).",
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
    return "\n\n".join(lines)

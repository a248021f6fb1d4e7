"""Probe one expert: what do n fresh demos of one subtask do for it, measured on the simulator?

The coach asks for demos of the subtask that fails first and retrains that expert's adapter. When
deployed success does not move, the question is whether the expert cannot learn the subtask from
that many demos, or whether the coach asked for the wrong ones. A probe answers the first part
alone: it copies a run's experts, deploys the subtask from the fixed evaluation seeds (the subtasks
before it run first, by the same experts), records `demos` scripted demos of it, retrains the
adapter exactly as the coach's Improve step does (`improve_experts`), and deploys again. Every
trial keeps its ground truth: whether the subtask completed, and its progress when it ended (a
press that went 5 of the 7.2 mm it needs ends at about 0.7, a cube never grasped near 0).

The run's experts are not touched: the probe trains a copy under `out/experts`. Its episode store
holds only its own demos, so the update trains on them alone, with no replay of older demos.
With `--demos-from <store>` it records nothing and retrains on the `demos` most recent demos of the
subtask in that store instead (a coach run's `episodes/`), with the coach's replay of the skill's older
demos there: what a round's update did with the demos it got, replayed offline (the store is only read).

    python -m robocoach_world.coach.probe --experts runs/demo/experts --robot franka \\
        --task press_push --subtask 0 --demos 25 --out runs/probe_press
    python -m robocoach_world.coach.probe --experts runs/demo/experts --task push_pick_bin \\
        --demos 25 --demos-from runs/exp/runs/robocoach/franka/seed0/episodes --out runs/probe_push_round
"""

from __future__ import annotations

import itertools
import logging
import shutil
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
import tyro
from matplotlib.figure import Figure
from tqdm import tqdm

from robocoach_skills.bootstrap import SEED_STRIDE, load_experts
from robocoach_skills.checkpoint import json_bytes, jsonable, replace_file_atomically
from robocoach_skills.composition import Composition, Subtask
from robocoach_skills.data.store import EpisodeStore, StoreInfo
from robocoach_skills.device import select_device
from robocoach_skills.evaluation import evaluate, evaluation_seeds
from robocoach_skills.measures import wilson_interval
from robocoach_skills.operator import OperatorConfig, ScriptedOperator
from robocoach_skills.router import Router, RouterConfig
from robocoach_skills.sim.scene import SceneConfig, SimScene
from robocoach_skills.skill_policy import LibraryPolicy
from robocoach_skills.tasks import get_composition
from robocoach_world.coach.improve import ImproveConfig, improve_experts
from robocoach_world.judge.detector import judge_detector_args

log = logging.getLogger(__name__)

PROBE_SEED_BASE = 4_000_000  # demos' initial states: apart from corpus, rollout, evaluation, imagination
PROBE_ROUND = 1  # the round the probe's adapter version is published as


@dataclass
class ProbeConfig:
    """Retrain one expert on fresh scripted demos of one subtask and deploy it before and after."""

    experts: Path  # expert library folder (backbone + adapters), e.g. <run>/experts; copied, never changed
    robot: str = "franka"  # embodiment, from ROBOTS
    task: str = "press_push"  # composition whose subtask is probed
    subtask: int = 0  # index of the probed subtask in the composition
    demos: int = 25  # accepted demos to record and train on
    # an episode store to take the `demos` most recent demos of the subtask from instead of recording
    # (e.g. a coach run's episodes/); the update replays the skill's older demos there, as the coach does
    demos_from: Path | None = None
    trials: int = 16  # deployed trials before and after, from the fixed evaluation seeds
    update: ImproveConfig = field(default_factory=ImproveConfig)  # the coach's update (steps, batch, seed)
    judge: Path | None = None  # judge folder: switch subtasks by its done rule and deadlines, as deployed
    deadline_steps: int | None = None  # every subtask's deadline [policy steps]; None: the run's own
    # Without --judge: the expert's done probability that ends a subtask. 1.0 never does: every subtask
    # runs to its deadline, which separates what the expert can do from when its done head stops it.
    done_threshold: float = RouterConfig.done_threshold
    max_takes: int = 3  # takes per demo before that demo slot is given up
    operator_seed: int = 0  # the scripted operator's hand randomness; also picks the demos' initial states
    out: Path = Path("runs/probe")  # experts/, demos/, probe.json, probe.md, probe.png
    threads: int = 1  # torch CPU threads

    def __post_init__(self) -> None:
        if self.demos < 1 or self.trials < 1 or self.max_takes < 1:
            raise ValueError(
                f"demos, trials and max_takes must be >= 1, got {self.demos}, {self.trials}, {self.max_takes}"
            )
        if self.deadline_steps is not None and self.deadline_steps < 1:
            raise ValueError(f"ProbeConfig.deadline_steps must be >= 1, got {self.deadline_steps}")


def probed_composition(robot: str, task: str, index: int) -> Composition:
    """The composition up to and including subtask `index`: trials end when the probed subtask does."""
    composition = get_composition(robot, task)
    if not 0 <= index < len(composition.subtasks):
        raise ValueError(
            f"{task} has {len(composition.subtasks)} subtasks "
            f"({', '.join(map(str, composition.subtasks))}); --subtask {index} is not one of them"
        )
    return composition.up_to(index)


def summarize_trials(completed: list[list[bool]], progress: list[list[float]], index: int) -> dict:
    """Subtask `index` over trials whose earlier subtasks all completed (only those reached it fairly).

    >>> s = summarize_trials([[True, True], [True, False], [False, False]], [[1, 1], [1, .6], [.2, 0]], 1)
    >>> s["reached"], s["completed"], s["success"], s["progress"]
    (2, 1, 0.5, [1.0, 0.6])
    """
    reached = [i for i, done in enumerate(completed) if all(done[:index])]
    wins = sum(bool(completed[i][index]) for i in reached)
    low, high = wilson_interval(wins, len(reached)) if reached else (0.0, 1.0)
    return {
        "trials": len(completed),
        "reached": len(reached),
        "completed": wins,
        "success": wins / len(reached) if reached else None,
        "wilson": [low, high],
        "progress": [float(progress[i][index]) for i in reached],
    }


def record_demos(
    scene: SimScene, composition: Composition, index: int, store: EpisodeStore, config: ProbeConfig
) -> tuple[list[str], list[int], int]:
    """`config.demos` accepted scripted demos of subtask `index` -> (episode ids, their lengths [steps],
    discarded takes)."""
    operator = ScriptedOperator(OperatorConfig(seed=config.operator_seed))
    seeds = itertools.count(PROBE_SEED_BASE + config.operator_seed * SEED_STRIDE + 1)
    ids, lengths, discarded = [], [], 0
    for _ in tqdm(range(config.demos), desc=f"demos of {composition.subtasks[index]}", leave=False):
        episode, failed = operator.successful_demo(scene, composition, index, seeds, config.max_takes)
        discarded += failed
        if episode is not None:
            ids.append(store.add(episode))
            lengths.append(len(episode))
    if not ids:
        raise RuntimeError(f"the scripted operator never completed {composition.subtasks[index]}")
    return ids, lengths, discarded


def stored_demos(store: EpisodeStore, robot: str, subtask: Subtask, n: int) -> tuple[list[str], list[int]]:
    """The `n` most recent successful `robot` demos of exactly `subtask` in `store` -> (ids, lengths)."""
    metas = [
        m
        for m in store.iter_meta(kind="demo", robot=robot, success=True)
        if m.composition.subtasks == (subtask,)
    ]
    if len(metas) < n:
        raise ValueError(
            f"{store.root} holds {len(metas)} successful {robot} demos of {subtask}; --demos {n} asked"
        )
    chosen = metas[-n:]
    return [m.episode_id for m in chosen], [m.length for m in chosen]


def main(config: ProbeConfig) -> dict:
    torch.set_num_threads(config.threads)
    composition = probed_composition(config.robot, config.task, config.subtask)
    skill = composition.subtasks[config.subtask].skill
    experts = config.out / "experts"
    if experts.exists():
        raise FileExistsError(f"{config.out} already holds a probe; pass another --out")
    if config.demos_from is not None:  # refused before anything is copied or deployed
        store = EpisodeStore(config.demos_from)
        ids, lengths = stored_demos(store, config.robot, composition.subtasks[config.subtask], config.demos)
        discarded = 0  # nothing recorded, nothing discarded
    shutil.copytree(config.experts, experts)
    device = select_device()
    library, registry, versions, run_deadlines = load_experts(experts)
    if skill not in library.skills:
        raise ValueError(f"{config.experts} has no {skill!r} expert; it has {', '.join(library.skills)}")
    library.to(device)
    router_config = RouterConfig(done_threshold=config.done_threshold, skill_deadline_steps=run_deadlines)
    detector_args = None
    if config.judge is not None:
        detector_args, judge_deadlines = judge_detector_args(config.judge, config.robot, device)
        deadlines = judge_deadlines.per_skill(config.robot, library.skills)
        router_config = RouterConfig(detector="judge", skill_deadline_steps=deadlines)
    if config.deadline_steps is not None:
        router_config = replace(router_config, deadline_steps=config.deadline_steps, skill_deadline_steps={})
    scene = SimScene(SceneConfig(robot=config.robot))
    seeds = evaluation_seeds(config.trials)

    def deploy(label: str, versions: dict[str, int]) -> dict:
        router = Router(LibraryPolicy(library, versions), router_config, detector_args)
        trials = evaluate(router, scene, composition, seeds).trials
        summary = summarize_trials(
            [t.ground_truth["completed"] for t in trials],
            [t.ground_truth["progress"] for t in trials],
            config.subtask,
        )
        done, reached = summary["completed"], summary["reached"]
        log.info("%s: %s completed in %d of %d trials that reached it", label, skill, done, reached)
        return {**summary, "steps": [t.steps for t in trials]}

    try:
        before = deploy("before", versions)
        if config.demos_from is None:
            info = StoreInfo(fps=scene.config.policy_hz, image_size=(scene.config.image_size,) * 2)
            store = EpisodeStore.create(config.out / "demos", info)
            ids, lengths, discarded = record_demos(scene, composition, config.subtask, store, config)
        (update,) = improve_experts(library, registry, store, {skill: ids}, PROBE_ROUND, config.update)
        after = deploy("after", {**versions, skill: update.version})
    finally:
        scene.close()
    report = {
        "config": jsonable(asdict(config)),
        "skill": skill,
        "subtask": str(composition.subtasks[config.subtask]),
        "seeds": seeds,
        "demos": {
            "source": str(store.root),
            "recorded": config.demos_from is None,
            "accepted": len(ids),
            "discarded": discarded,
            "mean_length": float(np.mean(lengths)),
            "ids": list(ids),
            "replay_ids": list(update.replay_episode_ids),
        },
        "adapter": {"parent": update.parent_version, "version": update.version, "metrics": update.metrics},
        "before": before,
        "after": after,
    }
    replace_file_atomically(config.out / "probe.json", json_bytes(report))
    replace_file_atomically(config.out / "probe.md", _markdown(report).encode())
    plot_probe(before, after, report["subtask"], config.out / "probe.png")
    return report


def _rate(summary: dict) -> str:
    if summary["success"] is None:
        return f"no trial reached it (of {summary['trials']})"
    low, high = summary["wilson"]
    return (
        f"{summary['completed']}/{summary['reached']} = {summary['success']:.0%} "
        f"(Wilson {low:.0%}-{high:.0%}), mean progress {np.mean(summary['progress']):.2f}"
    )


def _markdown(report: dict) -> str:
    c, demos = report["config"], report["demos"]
    return "\n".join(
        [
            f"# Probe: {report['subtask']} in {c['task']} ({c['robot']})",
            "",
            f"Experts from `{c['experts']}`; {_demos_line(demos)}; "
            f"adapter version {report['adapter']['parent']} -> {report['adapter']['version']} "
            f"after {c['update']['steps']} steps and {c['update']['dense_steps']} dense steps.",
            "",
            "Deployed from the evaluation seeds; trials count where the earlier subtasks completed.",
            "",
            f"- before: {_rate(report['before'])}",
            f"- after: {_rate(report['after'])}",
            "",
            "![probe.png](probe.png)",
            "",
        ]
    )


def _demos_line(demos: dict) -> str:
    if demos["recorded"]:
        return (
            f"{demos['accepted']} fresh scripted demos ({demos['discarded']} takes discarded, "
            f"{demos['mean_length']:.0f} steps on average)"
        )
    return (
        f"the {demos['accepted']} most recent demos of it in `{demos['source']}` "
        f"({demos['mean_length']:.0f} steps on average) and {len(demos['replay_ids'])} older ones replayed"
    )


def plot_probe(before: dict, after: dict, subtask: str, path: Path) -> Path:
    """Each trial's ground-truth progress of the probed subtask when it ended, before and after."""
    fig = Figure(figsize=(6.0, 4.0))
    ax = fig.add_subplot()
    rng = np.random.default_rng(0)  # horizontal jitter only
    for x, (label, summary) in enumerate((("before", before), ("after", after))):
        values = summary["progress"]
        ax.scatter(x + rng.uniform(-0.12, 0.12, len(values)), values, alpha=0.7, label=label)
        if values:
            ax.hlines(np.mean(values), x - 0.25, x + 0.25, color="black")
    ax.set_xticks([0, 1], [f"before ({_short(before)})", f"after ({_short(after)})"])
    ax.set(ylabel="ground-truth progress at subtask end", ylim=(-0.05, 1.05), title=f"probe: {subtask}")
    ax.axhline(1.0, color="grey", linestyle=":", linewidth=1)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path


def _short(summary: dict) -> str:
    return f"{summary['completed']}/{summary['reached']} done"


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)-7s %(name)s: %(message)s")
    report = main(tyro.cli(ProbeConfig))
    print(_markdown(report))

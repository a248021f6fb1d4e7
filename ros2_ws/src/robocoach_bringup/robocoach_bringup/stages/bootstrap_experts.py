"""Stage 2 of the main job: train the bootstrap experts and measure their deployed success.

Deployed success per composition and arm comes from the simulator's ground truth over a fixed set of
evaluation initial states (`evaluation_seeds`), the same set every later stage is measured on.
"""

from __future__ import annotations

from pathlib import Path

import torch
from matplotlib.figure import Figure

from robocoach_skills.bootstrap import ExpertTrainingConfig, load_experts, train_bootstrap_experts
from robocoach_skills.data.store import EpisodeStore
from robocoach_skills.evaluation import evaluate, evaluation_seeds
from robocoach_skills.experts.perception import PerceptionConfig
from robocoach_skills.experts.train import save_loss_curve
from robocoach_skills.router import Router, RouterConfig
from robocoach_skills.sim.scene import SceneConfig, SimScene
from robocoach_skills.skill_policy import LibraryPolicy
from robocoach_skills.tasks import training_compositions

TORCH_THREADS = 1  # measured faster than 2 on the 2-core machines while the simulator renders


def run(config, results: dict) -> dict:
    torch.set_num_threads(TORCH_THREADS)
    store = EpisodeStore(Path(results["bootstrap_demos"]["store"]))
    profile = config.profile
    perception = PerceptionConfig(
        frames=profile.perception_frames, steps=profile.perception_steps, seed=config.seed
    )
    training = ExpertTrainingConfig(steps=profile.train_steps, seed=config.seed, perception=perception)
    _, _, metrics, losses = train_bootstrap_experts(store, config.output / "experts", training)
    curve = save_loss_curve(losses, config.output / "bootstrap_loss.png")
    # Evaluate what is on disk, exactly what an executor would load.
    library, registry, versions, deadlines = load_experts(config.output / "experts")
    router = Router(LibraryPolicy(library, versions), RouterConfig(skill_deadline_steps=deadlines))
    seeds = evaluation_seeds(config.profile.eval_rollouts)
    success: dict[str, dict[str, float]] = {}
    first_failures: dict[str, dict[str, dict[int, int]]] = {}
    for robot in config.robots:
        scene = SimScene(SceneConfig(robot=robot, image_size=config.image_size))
        for composition in training_compositions(robot):
            result = evaluate(router, scene, composition, seeds)
            success.setdefault(robot, {})[composition.name] = result.success_rate
            first_failures.setdefault(robot, {})[composition.name] = dict(result.first_failures())
        scene.close()
    plot = _success_plot(success, config.output / "bootstrap_success.png")
    return {
        "experts": str(registry.root),
        "train_metrics": metrics,
        "deadlines": deadlines,
        "evaluation_seeds": seeds,
        "success": success,
        "first_failures": first_failures,
        "plots": [curve.name, plot.name],
        "markdown": _markdown(success, first_failures, seeds, metrics, deadlines, curve, plot),
    }


def _markdown(success, first_failures, seeds, metrics, deadlines, curve: Path, plot: Path) -> str:
    lines = [
        f"Experts pretrained for {metrics['train/steps']:.0f} steps "
        f"(loss {metrics['train/loss_first']:.3f} -> {metrics['train/loss_last']:.3f}); "
        "subtask deadlines [steps] from the demos: "
        + ", ".join(f"{k} {v}" for k, v in sorted(deadlines.items())),
        "",
        f"Deployed success (simulator ground truth) over {len(seeds)} evaluation seeds "
        f"{seeds[0]}..{seeds[-1]} per composition:",
        "",
        "| robot | composition | success | first failures (subtask index: trials) |",
        "|---|---|---|---|",
    ]
    for robot, per_task in success.items():
        for name, rate in per_task.items():
            failures = ", ".join(f"{i}: {n}" for i, n in sorted(first_failures[robot][name].items()))
            lines.append(f"| {robot} | {name} | {rate:.0%} | {failures} |")
        lines.append(f"| {robot} | **mean** | **{sum(per_task.values()) / len(per_task):.0%}** | |")
    lines += ["", f"![pretraining loss]({curve.name}) ![bootstrap success]({plot.name})"]
    return "\n".join(lines)


def _success_plot(success: dict[str, dict[str, float]], path: Path) -> Path:
    fig = Figure(figsize=(7, 0.9 + 0.3 * sum(len(v) for v in success.values())))
    ax = fig.add_subplot()
    labels = [f"{robot}: {name}" for robot, per_task in success.items() for name in per_task]
    values = [rate for per_task in success.values() for rate in per_task.values()]
    ax.barh(labels, values, color="tab:blue")
    ax.set(xlim=(0, 1), xlabel="deployed success rate", title="bootstrap experts")
    ax.invert_yaxis()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path

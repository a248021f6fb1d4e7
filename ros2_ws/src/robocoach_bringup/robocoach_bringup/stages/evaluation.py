"""Stage 5 of the main job: deployed and imagined success at every budget checkpoint, and their agreement.

A checkpoint is the experts' adapter versions before coaching and after each round (from the coach's
history). At each, every training and held-out composition is (a) deployed on the simulator from the
fixed evaluation seeds and scored by its ground truth, and (b) imagined in CoachWorld from the real
initial observations of the same seeds and scored by the judge (and, where stage 3 fitted one, also
calibrated per skill: robocoach_world.calibration). Deployed trials switch subtasks with
the judge (the executor's rule), so imagination and deployment differ only in where frames come from.
The arms run in parallel processes (the simulator's rendering is the cost).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from robocoach_bringup.graph import RunPaths
from robocoach_bringup.stages.ridi_rounds import coach_state_dir, coached_experts_dir
from robocoach_bringup.stages.side_by_side import side_by_side
from robocoach_skills.bootstrap import load_experts
from robocoach_skills.constants import OBS_IMAGE, OBS_PROPRIO
from robocoach_skills.device import select_device
from robocoach_skills.evaluation import evaluate, evaluation_seeds
from robocoach_skills.measures import budget_auc, wilson_interval
from robocoach_skills.router import Router, RouterConfig
from robocoach_skills.sim.scene import SceneConfig, SimScene
from robocoach_skills.skill_policy import LibraryPolicy
from robocoach_skills.tasks import held_out_compositions, training_compositions
from robocoach_world.calibration import CALIBRATION_FILE, ImaginationCalibration
from robocoach_world.coach.plots import plot_success_per_round
from robocoach_world.coach.state import CoachState
from robocoach_world.fidelity import calibrated, fidelity_markdown, fidelity_measures, pair_row
from robocoach_world.imagine import ImaginationConfig, imagine_composition
from robocoach_world.judge.detector import judge_detector_args
from robocoach_world.nodes.coach import STATE_FILE
from robocoach_world.world.artifacts import load_world

TORCH_THREADS = 1


def checkpoints(output: Path, robot: str, skills: list[str]) -> list[tuple[int, dict[str, int]]]:
    """(demos spent, adapter versions) before coaching (version 0: bootstrap) and after every round."""
    state = CoachState.load(coach_state_dir(output, robot) / STATE_FILE)
    versions, spent = dict.fromkeys(skills, 0), 0
    points = [(spent, dict(versions))]
    for entry in state.history:
        spent += sum(len(r["episode_ids"]) for r in entry["requests"])
        versions = {**versions, **entry["improved"]}
        points.append((spent, dict(versions)))
    return points


def evaluate_arm(
    output: Path, robot: str, rollouts: int, imagination: ImaginationConfig, n_compositions: int | None
) -> dict:
    """Deployed and imagined success of every composition at every checkpoint of one arm."""
    torch.set_num_threads(TORCH_THREADS)
    device = select_device()
    library, registry, _, _ = load_experts(coached_experts_dir(output, robot))
    library.to(device)
    detector_args, deadlines = judge_detector_args(RunPaths(output).judge, robot, device)
    judge, verdict = detector_args["judge"], detector_args["verdict"]
    world, _ = load_world(RunPaths(output).world, device)
    scene = SimScene(SceneConfig(robot=robot))
    seeds = evaluation_seeds(rollouts)
    compositions = (
        training_compositions(robot)[:n_compositions] + held_out_compositions(robot)[:n_compositions]
    )
    rows = []
    points = checkpoints(output, robot, registry.skills())
    bar = tqdm(total=len(points) * len(compositions), desc=f"evaluation ({robot})", unit="composition")
    for budget, versions in points:
        for skill, version in versions.items():
            registry.activate(library, skill, version)
        policy = LibraryPolicy(library, versions)
        router = Router(
            policy,
            RouterConfig(detector="judge", skill_deadline_steps=deadlines.per_skill(robot, library.skills)),
            detector_args,
        )
        for composition in compositions:
            deployed = evaluate(router, scene, composition, seeds)
            observations = [scene.reset(composition, seed) for seed in seeds]
            images = np.stack([o[OBS_IMAGE] for o in observations])
            proprio = np.stack([o[OBS_PROPRIO] for o in observations])
            trials = imagine_composition(
                world, judge, library, deadlines, composition, images, proprio,
                imagination, versions=versions, initial_seeds=seeds,
                verdict=verdict,
            )  # fmt: skip
            first_deployed = [t.ground_truth["first_failed"] for t in deployed.trials]
            rows.append(pair_row(composition, seeds, first_deployed, trials, robot=robot, budget=budget))
            bar.update()
    bar.close()
    scene.close()
    return {"robot": robot, "seeds": seeds, "rows": rows}


def run(config, results: dict) -> dict:
    profile = config.profile
    # the coach's imagination settings, so checkpoints are imagined as the coach imagined them
    imagination = ImaginationConfig(num_rollouts=profile.imagined_rollouts, horizon=profile.horizon)
    arms = side_by_side(
        [
            (
                evaluate_arm,
                (config.output, robot, profile.eval_rollouts, imagination, profile.eval_compositions),
            )
            for robot in config.robots
        ]
    )
    rows = [row for arm in arms for row in arm["rows"]]
    if (config.output / CALIBRATION_FILE).exists():  # stage 3's, where it recorded calibration rollouts
        calibration = ImaginationCalibration.load(config.output / CALIBRATION_FILE)
        rows = calibrated(rows, dict.fromkeys(config.robots, calibration))
    summary = _summarize(rows)
    plots = _plots(rows, config.output)
    return {
        "rows": rows,
        "seeds": arms[0]["seeds"] if arms else [],
        **summary,
        "fidelity": plots["fidelity"],
        "first_failure_agreement": plots["first_failure_agreement"],
        "plots": plots["files"],
        "markdown": _markdown(rows, summary, plots),
    }


def _summarize(rows: list[dict]) -> dict:
    """Per arm: success per budget checkpoint (training, held-out), Budget AUC; fidelity over all pairs."""
    per_arm = {}
    for robot in sorted({r["robot"] for r in rows}):
        mine = [r for r in rows if r["robot"] == robot]
        budgets = sorted({r["budget"] for r in mine})
        train = [
            float(np.mean([r["deployed_success"] for r in mine if r["budget"] == b and not r["held_out"]]))
            for b in budgets
        ]
        held = [
            float(np.mean([r["deployed_success"] for r in mine if r["budget"] == b and r["held_out"]]))
            for b in budgets
        ]
        n = sum(r["deployed_trials"] for r in mine if r["budget"] == budgets[-1] and not r["held_out"])
        per_arm[robot] = {
            "budgets": budgets,
            "training_success": train,
            "held_out_success": held,
            "final_interval": wilson_interval(round(train[-1] * n), n) if n else None,
            "budget_auc": budget_auc(train) if len(train) == 4 else None,
            "demos_used": budgets[-1],
        }
    return {"per_arm": per_arm}


def _plots(rows: list[dict], output: Path) -> dict:
    files = []
    for robot in sorted({r["robot"] for r in rows}):
        per_comp: dict[str, list[float]] = {}
        for r in sorted((r for r in rows if r["robot"] == robot), key=lambda r: r["budget"]):
            per_comp.setdefault(r["composition"], []).append(r["deployed_success"])
        files.append(plot_success_per_round(per_comp, output / f"success_{robot}.png").name)
    measures = fidelity_measures(rows, output, key=lambda r: f"{r['robot']}:{r['composition']}@{r['budget']}")
    return {**measures, "files": files + measures["files"]}


def _markdown(rows: list[dict], summary: dict, plots: dict) -> str:
    lines = ["| robot | demos | training success | held-out success |", "|---|---|---|---|"]
    for robot, arm in summary["per_arm"].items():
        for b, s, h in zip(arm["budgets"], arm["training_success"], arm["held_out_success"], strict=True):
            lines.append(f"| {robot} | {b} | {s:.0%} | {h:.0%} |")
    lines += fidelity_markdown(plots)
    lines += ["", " ".join(f"![{f}]({f})" for f in plots["files"])]
    return "\n".join(lines)

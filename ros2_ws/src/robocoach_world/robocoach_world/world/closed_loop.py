"""Closed-loop check of a CoachWorld: how far do the experts get inside it?

Open-loop scores (`world.evaluate`) replay recorded actions. Here the experts act on the imagined
frames and the judge switches subtasks, exactly as the coach imagines (`imagine_composition`), from
real initial observations of the scene. Per composition it reports the first failed subtask of every
trial whose world seeds agree, and the judged progress the active subtask peaked at; strip.png shows
one imagined trial per composition. A world model that never draws the arm doing the first subtask
makes every trial fail at subtask 0, whatever the experts can do.

    python -m robocoach_world.world.closed_loop --experts runs/demo/experts --judge runs/demo/judge \\
        --world runs/demo/world --robot franka --out runs/demo/closed_loop
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import tyro

from robocoach_skills.bootstrap import load_experts
from robocoach_skills.checkpoint import jsonable
from robocoach_skills.device import select_device
from robocoach_skills.sim.scene import SceneConfig, SimScene
from robocoach_skills.tasks import get_composition, training_compositions
from robocoach_world.experiment.ports import InitialObservations
from robocoach_world.imagine import ImaginationConfig, imagination_seeds, imagine_composition
from robocoach_world.judge.detector import judge_detector_args
from robocoach_world.world.artifacts import checkpoint_in, load_world
from robocoach_world.world.evaluate import save_strip


@dataclass
class ClosedLoopConfig:
    """Imagine a run's experts through whole compositions with a CoachWorld checkpoint."""

    experts: Path  # expert library folder (backbone + adapters), e.g. <run>/experts
    judge: Path  # progress judge folder with its deadlines, e.g. <run>/judge
    world: Path  # CoachWorld checkpoint, or a world.train run folder
    robot: str = "franka"  # embodiment, from ROBOTS
    compositions: tuple[str, ...] = ()  # composition names; empty: the robot's training compositions
    initial_states: int = 4  # real initial observations per composition (the coach's imagination seeds)
    rollouts: int = 8  # imagined trials per composition, spread over the initial observations
    horizon: int = ImaginationConfig.horizon  # most policy steps per trial
    out: Path = Path("runs/closed_loop")  # closed_loop.json and strip.png
    strip_frames: int = 8  # frames per composition in strip.png
    seed: int = 0  # world-model noise
    threads: int = 1  # torch CPU threads


def summarize(first_failed: list[int], peaks: list[float], n_subtasks: int) -> dict:
    """One composition's line: trials, success, share past subtask 0, first failures, mean peak progress.

    >>> s = summarize([0, 1, -1, 0], [0.2, 0.9, 1.0, 0.4], n_subtasks=2)
    >>> s["success"], s["past_first_subtask"], s["first_failed"], round(s["mean_peak_progress"], 3)
    (0.25, 0.5, {0: 2, 1: 1, -1: 1}, 0.625)
    """
    if not first_failed:
        return {"trials": 0, "n_subtasks": n_subtasks}
    return {
        "trials": len(first_failed),
        "n_subtasks": n_subtasks,
        "success": first_failed.count(-1) / len(first_failed),
        "past_first_subtask": sum(f != 0 for f in first_failed) / len(first_failed),
        "first_failed": dict(Counter(first_failed)),
        "mean_peak_progress": float(np.mean(peaks)),
    }


def main(config: ClosedLoopConfig) -> dict:
    torch.set_num_threads(config.threads)
    device = select_device()
    library, _, versions, _ = load_experts(config.experts)
    library.to(device)
    detector, deadlines = judge_detector_args(config.judge, config.robot, device)
    world, _ = load_world(checkpoint_in(config.world), device)
    comps = [get_composition(config.robot, n) for n in config.compositions] or training_compositions(
        config.robot
    )
    imagination = ImaginationConfig(
        num_rollouts=config.rollouts, horizon=config.horizon, seed=config.seed, keep_frames=True
    )
    seeds = imagination_seeds(config.initial_states)
    scene = SimScene(SceneConfig(robot=config.robot, image_size=world.config.image_size))
    initial = InitialObservations(scene, seeds)
    report, rows = {"config": jsonable(asdict(config)), "compositions": {}}, []
    for comp in comps:
        trials = imagine_composition(
            world,
            detector["judge"],
            library,
            deadlines,
            comp,
            *initial(comp),
            imagination,
            versions=versions,
            initial_seeds=seeds,
            verdict=detector["verdict"],
        )
        valid = [t for t in trials if t.record.valid]
        line = summarize(
            [t.record.first_failed_index for t in valid],
            [float(t.trace.max()) for t in valid],
            len(comp.subtasks),
        )
        report["compositions"][comp.name] = line
        print(f"{comp.name:>24}: {json.dumps(line)}", flush=True)
        frames = trials[0].frames
        picks = np.linspace(0, len(frames) - 1, config.strip_frames).round().astype(int)
        rows.append(np.concatenate(frames[picks], axis=1))
    scene.close()
    config.out.mkdir(parents=True, exist_ok=True)
    (config.out / "closed_loop.json").write_text(json.dumps(report, indent=2))
    title = f"one imagined trial per composition ({', '.join(c.name for c in comps)}), start to end"
    save_strip(np.concatenate(rows, axis=0), config.out / "strip.png", title)
    return report


if __name__ == "__main__":
    main(tyro.cli(ClosedLoopConfig))

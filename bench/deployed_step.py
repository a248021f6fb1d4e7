"""What one deployed policy step costs, and what two changes save, side by side in one run.

A deployed step (the experiment's evaluations, the oracle's targets, the robot's executor on the sim)
is: the expert acts (a new action chunk every `n_action_steps`), MuJoCo steps, the camera renders,
and the progress judge scores the frame. Three ways, alternated `repeats` times on the same trial:

  before  the expert's done head on every step between chunks (what every deployed step paid before
          session 44, when nothing read it under the judge; forced here by a monitor that reads it;
          each skipped call also switched the experts to eval mode and back, which this row omits)
  now     the done head only where the detector or a monitor reads it (the default)
  no-AA   as `now`, the camera rendered without multisample anti-aliasing
          (`SceneConfig.antialias_samples=0`): not the default, because the frames differ

`before` and `now` must execute the same actions (checked: the same final joint state). Render-only
time per frame and the mean pixel difference between the two anti-aliasing settings come first.
Default-sized models from their configs (or trained ones with --experts-dir/--judge-dir): the cost
does not depend on the weights. The judge never confirms, so every trial runs `steps` steps.

    source env.sh && python bench/deployed_step.py                 # 1 torch thread, 120 steps, 5 repeats
    python bench/deployed_step.py --experts-dir runs/demo/experts --judge-dir runs/demo/judge
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import tyro

from robocoach_skills.bootstrap import load_experts
from robocoach_skills.evaluation import evaluation_seeds
from robocoach_skills.experts import ExpertConfig, ExpertLibrary
from robocoach_skills.router import Router, RouterConfig, TrialMonitor
from robocoach_skills.sim.scene import SceneConfig, SimScene
from robocoach_skills.skill_policy import LibraryPolicy
from robocoach_skills.tasks import get_composition
from robocoach_world.judge.checkpoint import load_judge
from robocoach_world.judge.detector import JudgeDetector  # noqa: F401  registers the "judge" detector
from robocoach_world.judge.model import JudgeConfig, ProgressJudge
from robocoach_world.judge.verdict import VerdictConfig


@dataclass
class Args:
    robot: str = "franka"
    task: str = "pick_place_bin"
    steps: int = 120  # policy steps per measured trial
    repeats: int = 5  # alternations of the three ways; medians are reported
    threads: int = 1  # torch intra-op threads
    experts_dir: Path | None = None  # trained experts (default: ExpertConfig(), random weights)
    judge_dir: Path | None = None  # a trained judge (default: JudgeConfig(), random weights)


class ReadsDone(TrialMonitor):
    """Makes the router ask for the done probability at every step, as it did before session 44."""

    reads_done_probability = True


def trial(
    router: Router, scene: SimScene, args: Args, monitor: TrialMonitor | None
) -> tuple[float, np.ndarray]:
    """(seconds per step, final joint state) of one trial from the first evaluation seed."""
    composition = get_composition(args.robot, args.task)
    start = time.perf_counter()
    result = router.run(scene, composition, evaluation_seeds(1)[0], monitor)
    seconds = time.perf_counter() - start
    if result.steps != args.steps:
        raise RuntimeError(f"the trial ran {result.steps} steps, not {args.steps}: the judge confirmed")
    return seconds / result.steps, scene.joint_positions()


def render_ms(scene: SimScene, frames: int = 100) -> float:
    scene.render()  # the renderer is built on first use
    start = time.perf_counter()
    for _ in range(frames):
        scene.render()
    return (time.perf_counter() - start) / frames * 1e3


def main(args: Args) -> None:
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    composition = get_composition(args.robot, args.task)
    if args.experts_dir:
        library = load_experts(args.experts_dir)[0]
    else:
        library = ExpertLibrary(ExpertConfig(), skills=sorted(set(composition.skills)))
    judge = load_judge(args.judge_dir)[0] if args.judge_dir else ProgressJudge(JudgeConfig()).eval()
    never = VerdictConfig(consecutive=args.steps + 1)  # the done rule cannot fire within a trial
    config = RouterConfig(detector="judge", deadline_steps=args.steps)
    router = Router(LibraryPolicy(library), config, {"judge": judge, "robot": args.robot, "verdict": never})
    scenes = {
        samples: SimScene(SceneConfig(robot=args.robot, antialias_samples=samples)) for samples in (4, 0)
    }
    frames = {
        s: (scene.reset(composition, evaluation_seeds(1)[0]), scene.render())[1]
        for s, scene in scenes.items()
    }
    difference = np.abs(frames[4].astype(np.int16) - frames[0].astype(np.int16))
    print(
        f"{args.robot} {args.task}, {args.steps} steps per trial, {args.threads} torch thread(s), "
        f"{'trained' if args.experts_dir else 'random'} experts"
    )
    print(
        f"  render only: {render_ms(scenes[4]):.2f} ms/frame with 4x anti-aliasing, "
        f"{render_ms(scenes[0]):.2f} without; frames differ by {difference.mean():.2f} / 255 on average, "
        f"{(difference.max(axis=-1) > 16).mean():.1%} of pixels by more than 16"
    )
    ms: dict[str, list[float]] = {"before": [], "now": [], "no-AA": []}
    for repeat in range(args.repeats):
        before, joints_before = trial(router, scenes[4], args, ReadsDone())
        now, joints_now = trial(router, scenes[4], args, None)
        no_aa, _ = trial(router, scenes[0], args, None)
        if not np.array_equal(joints_before, joints_now):
            raise RuntimeError("skipping the unread done head changed the trial")
        for key, value in (("before", before), ("now", now), ("no-AA", no_aa)):
            ms[key].append(value * 1e3)
        print(f"  repeat {repeat + 1}: " + ", ".join(f"{k} {v[-1]:.2f} ms/step" for k, v in ms.items()))
    median = {k: float(np.median(v)) for k, v in ms.items()}
    print(
        "  median ms/step: "
        + ", ".join(f"{k} {v:.2f}" for k, v in median.items())
        + f"; before/now {np.median(np.divide(ms['before'], ms['now'])):.2f}x, "
        f"before/no-AA {np.median(np.divide(ms['before'], ms['no-AA'])):.2f}x, "
        f"now/no-AA {np.median(np.divide(ms['now'], ms['no-AA'])):.2f}x"
        " (same actions before and now: checked)"
    )
    for scene in scenes.values():
        scene.close()


if __name__ == "__main__":
    main(tyro.cli(Args))

"""Imagined vs simulated policy steps per second, same experts and initial states, in one run.

Simulation: the router drives the experts on the MuJoCo scene with 64x64 rendering and the progress
judge as its completion detector (what a deployed evaluation costs: the coach's evaluations and its
oracle switch subtasks by the judge). Imagination: the same experts inside CoachWorld with the same
judge, batch 1 and 64 trials (x world seeds). The simulation with the done head instead of the judge
is timed too (what the ratio would be for a router that trusts the experts' done heads).
Default-sized models from their configs (or checkpoints with --world-dir/--judge-dir): throughput
does not depend on the weights, only on the architecture.
A step is one policy step of one trial, all world-model seeds of that trial included.

    source env.sh && python bench/imagination_throughput.py                  # 1 thread, 60 steps
    python bench/imagination_throughput.py --threads 2 --world-seeds 1
    python bench/imagination_throughput.py --device cuda                     # models on a GPU

Simulation and imagination are measured in alternation, `repeats` times; the median ratio is the
result, since on a shared VM the speed of the host drifts within one run (seen here: 40-66 sim steps/s).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
import tyro

from robocoach_skills.constants import OBS_IMAGE, OBS_PROPRIO
from robocoach_skills.device import select_device
from robocoach_skills.evaluation import evaluation_seeds
from robocoach_skills.experts import ExpertConfig, ExpertLibrary
from robocoach_skills.router import Router, RouterConfig
from robocoach_skills.sim.scene import SceneConfig, SimScene
from robocoach_skills.skill_policy import LibraryPolicy
from robocoach_skills.tasks import get_composition
from robocoach_world.imagine import ImaginationConfig, imagine_composition
from robocoach_world.judge.checkpoint import load_judge
from robocoach_world.judge.detector import JudgeDetector  # noqa: F401  registers the "judge" detector
from robocoach_world.judge.model import JudgeConfig, ProgressJudge
from robocoach_world.judge.verdict import Deadlines, VerdictConfig
from robocoach_world.world.artifacts import load_world
from robocoach_world.world.model import CoachWorld, WorldConfig


@dataclass
class Args:
    robot: str = "franka"
    task: str = "pick_place_bin"
    steps: int = 60  # policy steps per measurement (deadlines are set so no trial ends earlier)
    world_seeds: int = 3  # world-model noise samples per imagined trial
    threads: int = 1  # torch intra-op threads
    device: str | None = None  # where the models run (None: select_device(), CUDA when present)
    world_dir: Path | None = None  # a trained CoachWorld checkpoint (default: WorldConfig())
    judge_dir: Path | None = None  # a trained judge directory (default: JudgeConfig())
    repeats: int = 3  # alternations of simulation and imagination; the median ratio is reported
    # also time batch 64 with the same world built without arm sketches: what the sketches cost
    sketch_cost: bool = True
    # the experts' architecture (e.g. --expert.keypoint-stride 2 --expert.no-argument-memory: the experts
    # before session 31)
    expert: ExpertConfig = field(default_factory=ExpertConfig)


def never_done(args: Args) -> VerdictConfig:
    """A done rule that cannot fire within a measurement: every trial runs to its first deadline."""
    return VerdictConfig(consecutive=args.steps + 1)


def simulated_steps_per_s(library: ExpertLibrary, judge: ProgressJudge | None, args: Args) -> float:
    """Policy steps/s of one simulated trial; `judge` None: the done head detects (it never fires)."""
    composition = get_composition(args.robot, args.task)
    scene = SimScene(SceneConfig(robot=args.robot))
    if judge is None:
        config, detector_args = RouterConfig(deadline_steps=args.steps, done_threshold=1.0), None
    else:
        config = RouterConfig(detector="judge", deadline_steps=args.steps)
        detector_args = {"judge": judge, "robot": args.robot, "verdict": never_done(args)}
    router = Router(LibraryPolicy(library), config, detector_args)
    start = time.perf_counter()
    trial = router.run(scene, composition, evaluation_seeds(1)[0])
    seconds = time.perf_counter() - start
    scene.close()
    return trial.steps / seconds


def imagined_steps_per_s(world, judge, library, batch: int, args: Args) -> float:
    composition = get_composition(args.robot, args.task)
    scene = SimScene(SceneConfig(robot=args.robot))
    observations = [scene.reset(composition, seed) for seed in evaluation_seeds(4)]
    scene.close()
    images = np.stack([o[OBS_IMAGE] for o in observations])
    proprio = np.stack([o[OBS_PROPRIO] for o in observations])
    deadlines = Deadlines({args.robot: {s.skill: args.steps for s in composition.subtasks}})
    config = ImaginationConfig(
        num_rollouts=batch, num_world_seeds=args.world_seeds, agreement=1, horizon=args.steps
    )
    start = time.perf_counter()
    trials = imagine_composition(
        world, judge, library, deadlines, composition, images, proprio, config, verdict=never_done(args)
    )
    seconds = time.perf_counter() - start
    return sum(max(s.steps for s in t.seeds) for t in trials) / seconds


def main(args: Args) -> None:
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device = select_device(args.device)
    world = load_world(args.world_dir, device)[0] if args.world_dir else CoachWorld(WorldConfig()).eval()
    judge = load_judge(args.judge_dir, device)[0] if args.judge_dir else ProgressJudge(JudgeConfig()).eval()
    skills = sorted({s.skill for s in get_composition(args.robot, args.task).subtasks})
    library = ExpertLibrary(args.expert, skills=skills)
    plain = CoachWorld(replace(world.config, arm_sketch=False)).eval() if args.sketch_cost else None
    for model in (world, judge, library, plain):
        if model is not None:
            model.to(device)
    sketch_ratios: list[float] = []
    print(
        f"{args.robot} {args.task}, {args.steps} policy steps, {args.world_seeds} world seeds per imagined "
        f"trial, {args.threads} torch thread(s), models on {device}"
    )
    ratios: dict[int, list[float]] = {1: [], 64: []}
    bare_ratios: list[float] = []  # batch 64 vs the simulation without the judge
    for repeat in range(args.repeats):
        simulated = simulated_steps_per_s(library, judge, args)
        bare = simulated_steps_per_s(library, None, args)
        line = (
            f"  repeat {repeat + 1}: simulated (MuJoCo + 64x64 rendering + judge) {simulated:6.1f} steps/s, "
            f"without the judge {bare:6.1f}"
        )
        for batch in ratios:
            imagined = imagined_steps_per_s(world, judge, library, batch, args)
            ratios[batch].append(imagined / simulated)
            line += f"; imagined batch {batch}: {imagined:6.1f} ({imagined / simulated:5.2f}x)"
        bare_ratios.append(ratios[64][-1] * simulated / bare)
        if plain is not None:
            imagined_plain = imagined_steps_per_s(plain, judge, library, 64, args)
            sketch_ratios.append(ratios[64][-1] * simulated / imagined_plain)
            line += f"; batch 64 without arm sketches: {imagined_plain:6.1f}"
        print(line)
    for batch, values in ratios.items():
        print(
            f"  imagined batch {batch:2d} vs simulated: median {np.median(values):5.2f}x "
            f"(range {min(values):.2f}-{max(values):.2f}x over {args.repeats} repeats)"
        )
    print(
        f"  imagined batch 64 vs simulated without the judge: median {np.median(bare_ratios):5.2f}x "
        f"(range {min(bare_ratios):.2f}-{max(bare_ratios):.2f}x)"
    )
    if sketch_ratios:
        print(
            f"  batch 64 with vs without arm sketches: median {np.median(sketch_ratios):5.2f}x "
            f"(range {min(sketch_ratios):.2f}-{max(sketch_ratios):.2f}x)"
        )


if __name__ == "__main__":
    main(tyro.cli(Args))

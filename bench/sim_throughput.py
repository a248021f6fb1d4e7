"""Simulated policy steps per second on the MuJoCo embedded robot: both arms, with and without
rendering, measured side by side in one run (absolute numbers on shared machines are noisy; the
ratios are what to compare).

    source env.sh && python bench/sim_throughput.py            # defaults: 200 steps, 64x64 frames
    python bench/sim_throughput.py --steps 500 --image-size 128
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import tyro

from robocoach_skills.constants import ROBOTS
from robocoach_skills.sim.scene import SceneConfig, SimScene
from robocoach_skills.tasks import training_compositions


@dataclass
class Args:
    steps: int = 200  # policy steps timed per configuration
    warmup: int = 10  # untimed steps first (renderer creation, caches)
    image_size: int = 64  # camera edge [px] when rendering
    seed: int = 0  # initial state and action noise
    motion: float = 0.02  # amplitude of the random joint motion per step [rad]


def steps_per_second(robot: str, render: bool, args: Args) -> float:
    scene = SimScene(SceneConfig(robot=robot, render=render, image_size=args.image_size))
    scene.reset(training_compositions(robot)[0], args.seed)
    rng = np.random.default_rng(args.seed)
    home = scene.joint_targets()

    def act() -> None:
        action = home.copy()
        action[:-1] += rng.uniform(-args.motion, args.motion, size=len(home) - 1)
        scene.step(action)

    for _ in range(args.warmup):
        act()
    start = time.perf_counter()
    for _ in range(args.steps):
        act()
    elapsed = time.perf_counter() - start
    scene.close()
    return args.steps / elapsed


def main(args: Args) -> None:
    size = f"{args.image_size}x{args.image_size}"
    print(f"simulated policy steps/s ({args.steps} steps, {size} frames when rendering)")
    print(f"{'robot':8s} {'physics only':>14s} {'with rendering':>16s} {'render cost':>12s}")
    for robot in ROBOTS:
        bare = steps_per_second(robot, False, args)
        rendered = steps_per_second(robot, True, args)
        print(f"{robot:8s} {bare:14.1f} {rendered:16.1f} {bare / rendered:11.2f}x")


if __name__ == "__main__":
    main(tyro.cli(Args))

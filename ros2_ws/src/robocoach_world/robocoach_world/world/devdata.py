"""Development data for CoachWorld: real MuJoCo episodes of both arms, successes and failures.

CoachWorld must imagine failing as well as succeeding, so next to the scripted operator's subtask
demos and whole-task demos this records whole-task runs with the operator's failure injection
(`OperatorConfig.failure_probability`: stop early, drift, miss, wrong object), stored as
`kind="rollout"`; whether each failed is the simulator's ground truth. Until the lead's recorded
expert rollouts exist they are the failure data; the world trainer reads any episode store.

    python -m robocoach_world.world.devdata --out runs/world_data --demos-per-skill 3 --tasks 3
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from robocoach_skills.bootstrap import BootstrapConfig, collect_bootstrap_demos
from robocoach_skills.constants import ROBOTS
from robocoach_skills.data.store import EpisodeStore, StoreInfo
from robocoach_skills.operator import OperatorConfig, ScriptedOperator
from robocoach_skills.sim.scene import SceneConfig, SimScene
from robocoach_skills.tasks import training_compositions

DEMOS_STORE = "demos"  # subtask demos + whole-task demos (kind "demo")
ROLLOUTS_STORE = "rollouts"  # whole-task runs with injected failures (kind "rollout")
FAILING_OPERATOR = OperatorConfig(failure_probability=0.8, seed=7)


@dataclass
class DevDataConfig:
    """How much development data to record per arm."""

    out: Path = Path("runs/world_data")  # parent directory of the two stores
    robots: tuple[str, ...] = ROBOTS  # arms to record
    demos_per_skill: int = 3  # bootstrap subtask demos per skill and arm
    tasks: int = 3  # whole-task demos and failure-injected runs per arm (first training compositions)
    image_size: int = 64  # camera edge [px]
    seed: int = 11  # initial-state seeds (apart from the bootstrap's default seed 0)

    def __post_init__(self) -> None:
        unknown = [r for r in self.robots if r not in ROBOTS]
        if unknown:
            raise ValueError(f"DevDataConfig.robots {unknown!r} not in {ROBOTS}")
        if self.demos_per_skill < 0 or self.tasks < 0:
            raise ValueError(f"counts must be >= 0, got {self.demos_per_skill!r}, {self.tasks!r}")


def record_dev_data(config: DevDataConfig) -> dict[str, int]:
    """Fill `<out>/demos` and `<out>/rollouts`; returns episode counts per (store, success)."""
    info = StoreInfo(fps=10.0, image_size=(config.image_size, config.image_size))
    demos = EpisodeStore.create(config.out / DEMOS_STORE, info, exist_ok=True)
    rollouts = EpisodeStore.create(config.out / ROLLOUTS_STORE, info, exist_ok=True)
    expert_like = ScriptedOperator(OperatorConfig(seed=config.seed))
    failing = ScriptedOperator(FAILING_OPERATOR)
    for robot in config.robots:
        if config.demos_per_skill:
            boot = BootstrapConfig(demos_per_skill=config.demos_per_skill, image_size=config.image_size)
            collect_bootstrap_demos(robot, demos, boot)
        scene = SimScene(SceneConfig(robot=robot, image_size=config.image_size))
        tasks = training_compositions(robot)[: config.tasks]
        for k, composition in enumerate(tqdm(tasks, desc=f"tasks {robot}")):
            seed = config.seed * 1000 + k
            demos.add(expert_like.demo_composition(scene, composition, seed))
            run = failing.demo_composition(scene, composition, seed + 500)
            meta = {
                **run.metadata,
                "policy": "failure-injecting scripted operator (devdata.FAILING_OPERATOR)",
            }
            rollouts.add(dataclasses.replace(run, kind="rollout", metadata=meta))
        scene.close()
    counts = {}
    for name, store in ((DEMOS_STORE, demos), (ROLLOUTS_STORE, rollouts)):
        for success in (True, False):
            counts[f"{name}/{'success' if success else 'failure'}"] = len(store.ids(success=success))
    return counts


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    defaults = DevDataConfig()
    parser.add_argument("--out", type=Path, default=defaults.out, help="parent of the demos/rollouts stores")
    parser.add_argument("--robots", nargs="+", default=list(defaults.robots), help="arms to record")
    parser.add_argument("--demos-per-skill", type=int, default=defaults.demos_per_skill)
    parser.add_argument("--tasks", type=int, default=defaults.tasks, help="whole-task runs per arm")
    parser.add_argument("--image-size", type=int, default=defaults.image_size)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    args = parser.parse_args(argv)
    config = DevDataConfig(
        out=args.out,
        robots=tuple(args.robots),
        demos_per_skill=args.demos_per_skill,
        tasks=args.tasks,
        image_size=args.image_size,
        seed=args.seed,
    )
    for key, n in record_dev_data(config).items():
        print(f"{key:20s} {n}")


if __name__ == "__main__":
    main()

"""A corpus of successes and realistic failures for the progress judge and the world model.

Neither can learn what failing looks like from clean demos alone. The corpus mixes, per arm:
scripted subtask demos and whole-composition demos (kind "demo"), and the same with one subtask
spoiled by the operator's failure injection (kind "rollout": they stand in for a weak policy's
runs, so expert training, which reads successful demos, never picks them up). Ground truth
(progress, subtask index, success) comes from the simulator; `metadata["injected_failure"]` says
what was injected, and `metadata["corpus_split"]` which split the episode belongs to.

Splits draw initial states from disjoint seed ranges, all apart from bootstrap seeds
(seed * 1000 + k, k small) and evaluation seeds (from 1_000_000):

    python -m robocoach_world.corpus --robot franka piper --out runs/corpus --split train
    python -m robocoach_world.corpus --robot franka piper --out runs/corpus_test --split test --held-out
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from robocoach_skills.composition import Composition
from robocoach_skills.data.episode import Episode
from robocoach_skills.data.store import EpisodeStore, StoreInfo
from robocoach_skills.evaluation import EVAL_SEED_BASE
from robocoach_skills.operator import OperatorConfig, ScriptedOperator
from robocoach_skills.sim.scene import SceneConfig, SimScene
from robocoach_skills.tasks import held_out_compositions, training_compositions

# First initial-state seed of each split; each split has SPLIT_SEED_SPAN seeds.
SPLIT_SEED_BASES: dict[str, int] = {"train": 300_000, "calibration": 500_000, "test": 700_000}
SPLIT_SEED_SPAN = 200_000
assert max(SPLIT_SEED_BASES.values()) + SPLIT_SEED_SPAN <= EVAL_SEED_BASE  # splits never reach eval seeds


@dataclass
class CorpusConfig:
    """What to record for one arm (counts are per composition or per (composition, subtask) use)."""

    split: str = "train"  # one of SPLIT_SEED_BASES: selects the initial-state seeds
    subtask_demos: int = 1  # clean subtask demos per (composition, subtask) use
    subtask_failures: int = 1  # failure-injected subtask episodes per (composition, subtask) use
    composition_demos: int = 2  # clean whole-composition demos per composition
    composition_failures: int = 2  # failure-injected whole-composition episodes per composition
    held_out: bool = False  # also record the held-out compositions (for judging, never for training)
    only: tuple[str, ...] = ()  # record only these compositions (by name); () = all of the suite
    image_size: int = 64  # camera edge [px]
    operator: OperatorConfig = dataclasses.field(default_factory=OperatorConfig)  # habits (failure modes)

    def __post_init__(self) -> None:
        if self.split not in SPLIT_SEED_BASES:
            raise ValueError(f"CorpusConfig.split {self.split!r} is not one of {sorted(SPLIT_SEED_BASES)}")
        for name in ("subtask_demos", "subtask_failures", "composition_demos", "composition_failures"):
            if getattr(self, name) < 0:
                raise ValueError(f"CorpusConfig.{name} must be >= 0, got {getattr(self, name)}")

    def compositions(self, robot: str) -> list[Composition]:
        suite = training_compositions(robot) + (held_out_compositions(robot) if self.held_out else [])
        unknown = sorted(set(self.only) - {c.name for c in suite})
        if unknown:
            raise ValueError(f"CorpusConfig.only names {unknown}, not in {[c.name for c in suite]}")
        return [c for c in suite if not self.only or c.name in self.only]

    def n_episodes(self, robot: str) -> int:
        comps = self.compositions(robot)
        uses = sum(len(c.subtasks) for c in comps)
        per_use = self.subtask_demos + self.subtask_failures
        return uses * per_use + len(comps) * (self.composition_demos + self.composition_failures)


def build_corpus(
    robot: str, store: EpisodeStore, config: CorpusConfig, show_progress: bool = True, bar_position: int = 0
) -> list[str]:
    """Record `config`'s episodes of `robot` into `store`; returns their ids in recording order.

    Every episode starts from its own seed (split base + running count), so a corpus is reproducible
    and its splits never share an initial state.
    """
    scene = SimScene(SceneConfig(robot=robot, image_size=config.image_size))
    clean = ScriptedOperator(dataclasses.replace(config.operator, failure_probability=0.0))
    spoiled = ScriptedOperator(dataclasses.replace(config.operator, failure_probability=1.0))
    seed = SPLIT_SEED_BASES[config.split]
    ids: list[str] = []
    bar = tqdm(
        total=config.n_episodes(robot),
        desc=f"corpus {config.split} {robot}",
        disable=not show_progress,
        position=bar_position,  # arms recorded side by side each keep their own line
    )

    def record(episode: Episode) -> None:
        injected = episode.metadata.get("injected_failure") is not None
        episode = dataclasses.replace(
            episode,
            kind="rollout" if injected else "demo",
            metadata={**episode.metadata, "corpus_split": config.split},
        )
        ids.append(store.add(episode))
        bar.update()

    try:
        for composition in config.compositions(robot):
            for index in range(len(composition.subtasks)):
                for operator, n in ((clean, config.subtask_demos), (spoiled, config.subtask_failures)):
                    for _ in range(n):
                        seed += 1
                        record(operator.demo_subtask(scene, composition, index, seed))
            for operator, n in ((clean, config.composition_demos), (spoiled, config.composition_failures)):
                for _ in range(n):
                    seed += 1
                    record(operator.demo_composition(scene, composition, seed))
    finally:
        bar.close()
        scene.close()
    return ids


def main(argv: list[str] | None = None) -> None:
    """Record a judge/world-model corpus into an episode store (created if missing)."""
    defaults = CorpusConfig()
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--robot", nargs="+", default=["franka"], help="arms to record, e.g. franka piper")
    parser.add_argument("--out", type=Path, required=True, help="episode store directory")
    parser.add_argument("--split", default=defaults.split, choices=sorted(SPLIT_SEED_BASES))
    parser.add_argument("--subtask-demos", type=int, default=defaults.subtask_demos)
    parser.add_argument("--subtask-failures", type=int, default=defaults.subtask_failures)
    parser.add_argument("--composition-demos", type=int, default=defaults.composition_demos)
    parser.add_argument("--composition-failures", type=int, default=defaults.composition_failures)
    parser.add_argument("--held-out", action="store_true", help="also record the held-out compositions")
    parser.add_argument("--only", nargs="*", default=[], help="record only these compositions")
    parser.add_argument("--image-size", type=int, default=defaults.image_size)
    parser.add_argument("--operator-seed", type=int, default=0)
    args = parser.parse_args(argv)
    config = CorpusConfig(
        split=args.split,
        subtask_demos=args.subtask_demos,
        subtask_failures=args.subtask_failures,
        composition_demos=args.composition_demos,
        composition_failures=args.composition_failures,
        held_out=args.held_out,
        only=tuple(args.only),
        image_size=args.image_size,
        operator=OperatorConfig(seed=args.operator_seed),
    )
    info = StoreInfo(fps=SceneConfig().policy_hz, image_size=(args.image_size, args.image_size))
    store = EpisodeStore.create(args.out, info, exist_ok=True)
    for robot in args.robot:
        ids = build_corpus(robot, store, config)
        failed = sum(not store.meta(i).success for i in ids)
        print(f"{robot}: {len(ids)} episodes ({failed} failed) -> {args.out}")


if __name__ == "__main__":
    main()

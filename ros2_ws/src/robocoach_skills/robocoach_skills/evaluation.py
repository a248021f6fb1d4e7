"""Deployed evaluation: run routed trials on the simulator and score them with its ground truth.

This is the "deployed" side of every imagined-vs-deployed comparison and the only judge of methods.
Each composition has a fixed, seeded set of evaluation initial states (`evaluation_seeds`), disjoint
from bootstrap and demo seeds, so every method is measured from the very same starts.

A subtask counts as completed when the simulator's success predicate holds at the moment the
router leaves it (confirmed by the completion detector); the first subtask that was not completed
then is the trial's first failure, whether the router timed out there or switched too early.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from robocoach_skills import measures
from robocoach_skills.composition import Composition
from robocoach_skills.router import Router, TrialMonitor, TrialResult
from robocoach_skills.sim.scene import SimScene

EVAL_SEED_BASE = 1_000_000  # evaluation seeds start here; bootstrap/demo seeds stay far below


def evaluation_seeds(n: int, base: int = EVAL_SEED_BASE) -> list[int]:
    """The fixed initial-state seeds of an n-rollout evaluation (the same for every method)."""
    return list(range(base, base + n))


class GroundTruthMonitor(TrialMonitor):
    """Reads the simulator's ground truth as the router moves through a trial."""

    def __init__(self, scene: SimScene) -> None:
        self.scene = scene
        self.progress: list[float] = []
        self.completed: list[bool] = []

    def on_subtask_start(self, index: int) -> None:
        self.scene.start_subtask(index)

    def on_subtask_end(self, index: int, confirmed: bool) -> None:
        self.progress.append(self.scene.subtask_progress(index))
        self.completed.append(self.scene.subtask_success(index))

    def summary(self, n_subtasks: int) -> dict:
        """Per-subtask progress/completion (0/False where never reached), first failure, success."""
        progress = self.progress + [0.0] * (n_subtasks - len(self.progress))
        completed = self.completed + [False] * (n_subtasks - len(self.completed))
        first_failed = next((i for i, done in enumerate(completed) if not done), -1)
        return {
            "progress": progress,
            "completed": completed,
            "first_failed": first_failed,
            "success": all(completed),
        }


@dataclass
class EvaluationResult:
    composition: str
    robot: str
    trials: list[TrialResult] = field(default_factory=list)

    @property
    def success_rate(self) -> float:
        return success_rate(self.trials)

    def first_failures(self) -> Counter:
        """Subtask index -> number of trials that failed first there."""
        return Counter(t.ground_truth["first_failed"] for t in self.trials if not t.ground_truth["success"])


def success_rate(trials: list[TrialResult]) -> float:
    """Fraction of trials whose every subtask completed (measures.success_rate over ground truth)."""
    return measures.success_rate([t.ground_truth["success"] for t in trials])


def evaluate(router: Router, scene: SimScene, composition: Composition, seeds: list[int]) -> EvaluationResult:
    """Run one routed trial per seed on the simulator and attach the ground truth to each."""
    result = EvaluationResult(composition.name, composition.robot)
    for seed in seeds:
        monitor = GroundTruthMonitor(scene)
        trial = router.run(scene, composition, seed, monitor)
        trial.ground_truth = {
            **monitor.summary(len(composition.subtasks)),
            "region": scene.initial_state.region,
        }
        result.trials.append(trial)
    return result

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

import numpy as np

from robocoach_skills import measures
from robocoach_skills.composition import Composition, Subtask
from robocoach_skills.constants import OBS_IMAGE, OBS_PROPRIO
from robocoach_skills.data.episode import Episode
from robocoach_skills.data.store import EpisodeStore
from robocoach_skills.router import CompletionDetector, Router, RouterConfig, TrialMonitor, TrialResult
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


class HeldTruthDetector(CompletionDetector):
    """Confirms `hold_steps` after the simulator first sees the active subtask complete, or at its
    deadline if that comes first; never confirms a subtask that did not complete.

    For recording calibration rollouts only: it reads privileged state, so it is not one of the
    router's DETECTORS. The expert keeps acting on a completed subtask for as long as a deployed
    detector may take to confirm it, so the judge's done threshold is chosen on video paced as
    deployment paces it, not on video that moved on at completion.
    """

    reads_done_probability = False

    def __init__(self, config: RouterConfig, scene: SimScene, hold_steps: int) -> None:
        if hold_steps < 0:
            raise ValueError(f"hold_steps must be >= 0, got {hold_steps}")
        self.config, self.scene, self.hold_steps = config, scene, hold_steps
        self._deadline, self._steps, self._held = 0, 0, -1

    def reset(self, subtask: Subtask) -> None:
        self._deadline, self._steps, self._held = self.config.deadline(subtask.skill), 0, -1

    def update(self, obs: dict, done_prob: float, action: np.ndarray) -> bool:
        self._steps += 1
        if self._held >= 0:
            self._held += 1
        elif self.scene.subtask_success(self.scene.active_subtask):
            self._held = 0
        return self._held >= 0 and (self._held >= self.hold_steps or self._steps >= self._deadline)


class RecordingEnv:
    """The scene as the router's RobotEnv, keeping every frame, applied action and ground-truth label.

    Expert rollouts, failures included, are what CoachWorld must learn to imagine and the judge to
    diagnose; this records them in the episode format (frame t observed, then action t applied).
    """

    def __init__(self, scene: SimScene) -> None:
        self.scene = scene
        self._frames: list[dict] = []
        self._actions: list[np.ndarray] = []
        self._labels: list[tuple[int, float]] = []

    def reset(self, composition: Composition, seed: int) -> dict:
        obs = self.scene.reset(composition, seed)
        self._frames, self._actions, self._labels = [obs], [], [self._label()]
        return obs

    def step(self, action: np.ndarray) -> dict:
        applied = self.scene.apply_action(action)  # clipped to the arm's limits, as it really ran
        obs = self.scene.observe()
        self._actions.append(np.asarray(applied, dtype=np.float32))
        self._frames.append(obs)
        self._labels.append(self._label())
        return obs

    def _label(self) -> tuple[int, float]:
        active = min(self.scene.active_subtask, len(self.scene.composition.subtasks) - 1)
        return active, self.scene.subtask_progress(active)

    def episode(self, composition: Composition, seed: int, success: bool, metadata: dict) -> Episode:
        """The trial just run; the last frame's action repeats the last command (the arm holds)."""
        actions = [*self._actions, self._actions[-1] if self._actions else self.scene.joint_targets()]
        return Episode(
            composition=composition,
            seed=seed,
            fps=self.scene.config.policy_hz,
            images=np.stack([f[OBS_IMAGE] for f in self._frames]),
            proprio=np.stack([f[OBS_PROPRIO] for f in self._frames]).astype(np.float32),
            actions=np.stack(actions).astype(np.float32),
            subtask_index=np.array([i for i, _ in self._labels], dtype=np.int16),
            progress=np.array([p for _, p in self._labels], dtype=np.float32),
            success=success,
            kind="rollout",
            metadata=metadata,
        )


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


def evaluate(
    router: Router,
    scene: SimScene,
    composition: Composition,
    seeds: list[int],
    record_to: EpisodeStore | None = None,
) -> EvaluationResult:
    """Run one routed trial per seed on the simulator and attach the ground truth to each.

    With `record_to`, every trial is also stored as a "rollout" episode (expert versions, outcome
    and ground-truth first failure in its metadata).
    """
    result = EvaluationResult(composition.name, composition.robot)
    env = RecordingEnv(scene) if record_to is not None else scene
    for seed in seeds:
        monitor = GroundTruthMonitor(scene)
        trial = router.run(env, composition, seed, monitor)
        trial.ground_truth = {
            **monitor.summary(len(composition.subtasks)),
            "region": scene.initial_state.region,
        }
        result.trials.append(trial)
        if record_to is not None:
            metadata = {
                "expert_versions": trial.expert_versions,
                "outcome": trial.outcome,
                "first_failed": trial.ground_truth["first_failed"],
                "recorder": "evaluation",
            }
            record_to.add(env.episode(composition, seed, trial.ground_truth["success"], metadata))
    return result

"""CoachPorts without ROS: the experiment's coach imagines, collects and publishes in this process.

`LocalPorts` does what `nodes.coach.RosPorts` does over the graph: initial observations are real
SimScene resets to the coach's imagination seeds, demo requests are answered by the very
`ScriptedSession` the scripted_operator node runs, acceptance checks deploy on the same simulator as
the evaluation (scored by its ground truth), adapters are already live in this process (nothing to
push), and a closed round is logged. Where the targets come from is a `TargetSource`:

* `WorldModelTargets`: `imagine_composition` in CoachWorld, judged by the progress judge (RoboCoach),
  with failure clips for the scorecard when asked for;
* `DeployedTargets`: the current experts deployed on the simulator from the same seeds, judged by its
  ground truth (the oracle: what imagination would say if it were perfect);
* `PriorTargets`: no rollout at all; uniform (every subtask fails first once) or random first failures.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Protocol

import numpy as np

from robocoach_skills.composition import Composition
from robocoach_skills.constants import OBS_IMAGE, OBS_PROPRIO
from robocoach_skills.evaluation import evaluate
from robocoach_skills.experts.model import ChunkPolicy
from robocoach_skills.router import Router
from robocoach_skills.sim.scene import SimScene
from robocoach_skills.teleop.scripted import ScriptedSession
from robocoach_skills.teleop.session import (
    DemoRequestSpec,
    RequestRejectedError,
    resolve_request,
    stable_seed,
)
from robocoach_world.coach.acceptance import subtask_outcome
from robocoach_world.coach.loop import Collected, Imagined
from robocoach_world.coach.scorecard import FailureClip
from robocoach_world.coach.state import RequestState
from robocoach_world.imagine import ImaginationConfig, failure_examples, imagine_composition
from robocoach_world.judge.model import ProgressJudge
from robocoach_world.judge.verdict import Deadlines, VerdictConfig
from robocoach_world.records import SOURCE_DEPLOYED, SOURCE_IMAGINED, TrialRecord
from robocoach_world.world.model import CoachWorld

log = logging.getLogger("robocoach.experiment")


class TargetSource(Protocol):
    """The trials a round is diagnosed from (CoachPorts.imagine)."""

    def __call__(self, composition: Composition, versions: dict[str, int]) -> Imagined: ...


class InitialObservations:
    """Real camera frames and joint states of a composition's initial states, reset once and kept."""

    def __init__(self, scene: SimScene, seeds: Sequence[int]) -> None:
        self.scene, self.seeds = scene, list(seeds)
        self._cache: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def __call__(self, composition: Composition) -> tuple[np.ndarray, np.ndarray]:
        """(images (N, H, W, 3) uint8, proprio (N, native_dim)) for the N seeds."""
        if composition.name not in self._cache:
            observations = [self.scene.reset(composition, seed) for seed in self.seeds]
            self._cache[composition.name] = (
                np.stack([o[OBS_IMAGE] for o in observations]),
                np.stack([o[OBS_PROPRIO] for o in observations]),
            )
        return self._cache[composition.name]


class WorldModelTargets:
    """Imagined trials of the current experts, diagnosed by the judge (what the coach node asks for).

    With `clips` > 0 the frames are kept, and the first `clips` failed trials per first-failed subtask
    come back as failure clips (as the world model node returns them); the other frames are dropped.
    """

    def __init__(
        self,
        world: CoachWorld,
        judge: ProgressJudge,
        verdict: VerdictConfig,
        deadlines: Deadlines,
        library: ChunkPolicy,
        observations: InitialObservations,
        config: ImaginationConfig,
        clips: int = 0,
    ) -> None:
        self.world, self.judge, self.verdict, self.deadlines = world, judge, verdict, deadlines
        self.library, self.observations, self.clips = library, observations, clips
        self.config = replace(config, keep_frames=clips > 0)

    def __call__(self, composition: Composition, versions: dict[str, int]) -> Imagined:
        images, proprio = self.observations(composition)
        trials = imagine_composition(
            self.world, self.judge, self.library, self.deadlines, composition, images, proprio, self.config,
            versions=versions, initial_seeds=self.observations.seeds, verdict=self.verdict,
        )  # fmt: skip
        shown = [trials[k] for k in failure_examples(trials, self.clips)]
        return Imagined(
            [t.record for t in trials],
            [FailureClip.of_trial(composition, t.record, t.frames, t.trace, t.active) for t in shown],
        )


class DeployedTargets:
    """The oracle: the current experts deployed on the simulator, judged by its ground truth."""

    def __init__(self, router: Callable[[dict[str, int]], Router], scene: SimScene, seeds: Sequence[int]):
        self.router, self.scene, self.seeds = router, scene, list(seeds)

    def __call__(self, composition: Composition, versions: dict[str, int]) -> Imagined:
        result = evaluate(self.router(versions), self.scene, composition, self.seeds)
        return Imagined(
            [
                TrialRecord.of_route(
                    composition, versions, trial.ground_truth["first_failed"], k, seed, SOURCE_DEPLOYED
                )
                for k, (seed, trial) in enumerate(zip(self.seeds, result.trials, strict=True))
            ]
        )


class PriorTargets:
    """Records behind no rollout, for acquisitions that ignore how the experts fail.

    uniform: one trial per subtask, failing first there, so every pair of every composition has mass.
    random: `per_composition` trials whose first failures are drawn uniformly, seeded by (seed,
    composition, versions), so each round (new versions) draws anew and a resumed run draws the same.
    Records are marked imagined, the only non-deployed source; the experiment report says they are priors.
    """

    def __init__(self, random: bool, seeds: Sequence[int], seed: int, per_composition: int) -> None:
        self.random, self.seeds, self.seed, self.per_composition = random, list(seeds), seed, per_composition

    def __call__(self, composition: Composition, versions: dict[str, int]) -> Imagined:
        n = len(composition.subtasks)
        if self.random:
            key = stable_seed(self.seed, composition.robot, composition.name, sorted(versions.items()))
            failures = np.random.default_rng(key).integers(0, n, self.per_composition).tolist()
        else:
            failures = list(range(n))
        states = len(self.seeds)
        return Imagined(
            [
                TrialRecord.of_route(
                    composition, versions, failed, k % states, self.seeds[k % states], SOURCE_IMAGINED
                )
                for k, failed in enumerate(failures)
            ]
        )


class LocalPorts:
    """CoachPorts in this process (see the module docstring)."""

    def __init__(
        self,
        targets: TargetSource,
        session: ScriptedSession,
        robot: str,
        router: Callable[[dict[str, int]], Router],
        scene: SimScene,
    ) -> None:
        self.targets, self.session, self.robot = targets, session, robot
        self.router, self.scene = router, scene

    def imagine(self, composition: Composition, versions: dict[str, int]) -> Imagined:
        return self.targets(composition, versions)

    def collect(self, request: RequestState) -> Collected:
        spec = DemoRequestSpec(
            request_id=request.request_id, robot=request.robot, subtask=request.subtask,
            composition=request.composition, count=request.remaining, seeds=request.seeds,
            reason=request.reason, priority=request.priority, round=request.round,
        )  # fmt: skip
        try:
            target = resolve_request(spec, self.robot)
        except RequestRejectedError as error:
            return Collected([], error.reason)
        takes = self.session.collect(target, on_status=lambda text, accepted: None, canceled=lambda: False)
        accepted = [t.episode_id for t in takes if t.accepted]
        short = len(accepted) < spec.count
        return Collected(
            accepted, f"{spec.count - len(accepted)} demo slots failed every take" if short else ""
        )

    def deploy_subtask(
        self, composition: Composition, index: int, versions: dict[str, int], seeds: Sequence[int]
    ) -> list[float | None]:
        trials = evaluate(self.router(versions), self.scene, composition.up_to(index), seeds).trials
        return [
            subtask_outcome(t.ground_truth["completed"], t.ground_truth["progress"], index) for t in trials
        ]

    def push_adapters(self, versions: Mapping[str, int]) -> None:
        """Nothing to do: the coach retrained the very library this process evaluates and imagines with."""

    def publish_round(self, entry: dict) -> None:
        spent = sum(len(r["episode_ids"]) for r in entry["requests"])
        log.info("round %d closed: %d demos, retrained %s", entry["round"], spent, sorted(entry["improved"]))

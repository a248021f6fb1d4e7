"""One (method, arm, seed) run of the comparison: the coach's loop over LocalPorts, evaluated per round.

    result = run_one(inputs, run_dir, RunSpec("robocoach", "franka", seed=0), RunSettings())

`inputs` is a `robocoach demo` run directory (episodes/, experts/, world/, judge/). The run works in
`run_dir` on its own copies of the bootstrap experts and demo store (demos it collects land there),
keeps its state there, and evaluates the policy before coaching and after every round on the fixed
evaluation seeds (deployed on the simulator, the judge switching subtasks as the executor does,
scored by the simulator's ground truth). Each checkpoint's evaluation is its own file, written
before the next round starts, and `result.json` + `DONE` mark a finished run: an interrupted run
resumes through its state (`CoachState`; (f): `WholeTaskState`) and skips the checkpoints it already
evaluated.

Rounds are spent by the coach's loop, or for (f) by `end_to_end.WholeTaskTeacher` on the same
`CoachConfig` schedule; everything else (preparation, evaluation, result.json) is shared. A
composition without a policy ((f) on a held-out one) is evaluated as unsupported: every trial a
failure, and its name in the checkpoint's `unsupported`.
"""

from __future__ import annotations

import fcntl
import json
import logging
import shutil
import time
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch
from torch.utils.data import DataLoader

from robocoach_skills.bootstrap import ADAPTERS_DIR, BACKBONE_DIR, load_experts
from robocoach_skills.checkpoint import json_bytes, replace_file_atomically
from robocoach_skills.composition import Composition
from robocoach_skills.data.dataset import DatasetConfig, EpisodeDataset
from robocoach_skills.data.store import EpisodeStore
from robocoach_skills.device import select_device
from robocoach_skills.evaluation import evaluate, evaluation_seeds
from robocoach_skills.experts.artifacts import load_backbone
from robocoach_skills.experts.baselines import EndToEndPolicy, SharedAdapterPolicy
from robocoach_skills.experts.model import ChunkPolicy
from robocoach_skills.experts.registry import AdapterRegistry
from robocoach_skills.experts.train import update_adapter
from robocoach_skills.router import Router, RouterConfig, SkillPolicy
from robocoach_skills.sim.scene import SceneConfig, SimScene
from robocoach_skills.skill_policy import LibraryPolicy
from robocoach_skills.tasks import get_composition, held_out_compositions, training_compositions
from robocoach_skills.teleop.scripted import ScriptedSession, ScriptedSessionConfig
from robocoach_world.calibration import CALIBRATION_FILE, ImaginationCalibration
from robocoach_world.coach.acceptance import AcceptanceConfig
from robocoach_world.coach.allocation import AllocationConfig
from robocoach_world.coach.diagnosis import DiagnosisConfig
from robocoach_world.coach.improve import ROUND_METRIC, ImproveConfig
from robocoach_world.coach.loop import Coach, CoachConfig
from robocoach_world.coach.state import CoachState
from robocoach_world.experiment.end_to_end import STATE_FILE as WHOLE_TASK_STATE_FILE
from robocoach_world.experiment.end_to_end import (
    CompositionPolicy,
    WholeTaskState,
    WholeTaskTeacher,
    frames_per_subtask_demo,
    init_end_to_end,
    load_end_to_end,
)
from robocoach_world.experiment.methods import METHODS, TARGETED, Method, PolicyKind, Targets
from robocoach_world.experiment.ports import (
    DeployedTargets,
    InitialObservations,
    LocalPorts,
    PriorTargets,
    TargetSource,
    WorldModelTargets,
)
from robocoach_world.imagine import INITIAL_STATES, ImaginationConfig, imagination_seeds
from robocoach_world.judge.detector import judge_detector_args
from robocoach_world.world.artifacts import load_world

log = logging.getLogger("robocoach.experiment")

STATE_FILE, RESULT_FILE, DONE_FILE = "coach_state.json", "result.json", "DONE"
SETTINGS_FILE = "settings.json"  # the RunSettings a run directory was started with
EXPERIMENT_FILE = "experiment.json"  # in an experiment's output folder: every run's result and the summary
# What a run folder written before a setting existed ran (its settings.json lacks the key).
SETTINGS_BEFORE = {"targeted_min_gain": None, "calibrated_targets": False}


@dataclass(frozen=True)
class RunSpec:
    method: str  # a name in METHODS
    robot: str
    seed: int  # seeds adapter updates, imagination noise, the operator's hand and random targets

    @property
    def key(self) -> str:
        return f"{self.method}/{self.robot}/seed{self.seed}"

    @property
    def run_id(self) -> str:
        """The coach's run id, from the key: request ids seed the scripted operator's hand, so a rerun
        of the same run records the same demos (a drawn id made every rerun's demos differ).

        >>> RunSpec("robocoach", "franka", 0).run_id
        '9eb1f2ec'
        """
        return f"{zlib.crc32(self.key.encode()):08x}"


@dataclass(frozen=True)
class RunSettings:
    """What every run shares: the matched budget, schedule and evaluation."""

    budget: int = CoachConfig.budget  # subtask demos per arm; (f): as many demo frames as these are worth
    demos_per_round: int = CoachConfig.demos_per_round
    eval_rollouts: int = 20  # evaluation initial states per composition (evaluation_seeds)
    training: tuple[str, ...] = ()  # training compositions coached and evaluated; () = all
    held_out: tuple[str, ...] = ()  # held-out compositions evaluated; () = all four
    initial_states: int = INITIAL_STATES  # real initial observations per composition imagined from
    imagined_rollouts: int = ImaginationConfig.num_rollouts  # imagined trials per composition and round
    num_world_seeds: int = ImaginationConfig.num_world_seeds
    horizon: int = ImaginationConfig.horizon  # imagined policy steps per trial
    adapter_steps: int = ImproveConfig.steps  # optimiser steps per retrained adapter
    dense_steps: int = ImproveConfig.dense_steps  # ... then steps on the vision those left (ImproveConfig)
    # deployed trials per version checking each update before it is kept (coach.acceptance); 0: none
    check_trials: int = AcceptanceConfig.trials
    min_reach: int = DiagnosisConfig.min_reach  # diagnosis: pairs reached by fewer valid trials get no demos
    targeted_allocation: str = AllocationConfig.strategy  # (b, c, d, g)'s strategy (methods.TARGETED)
    targeted_min_gain: float | None = AllocationConfig.min_gain  # (b, d, g): AllocationConfig.min_gain
    # (b, d): diagnose imagined trials with the inputs' imagination calibration, where they have one
    # (coach.diagnosis: calibrated masses); False: raw imagined masses
    calibrated_targets: bool = True
    shared_init_steps: int = 300  # shared-adapter baselines: steps per skill fitting the shared adapter
    end_to_end_init_steps: int = 300  # (f): steps per composition fitting its policy on bootstrap demos
    max_takes_per_demo: int = 5  # scripted operator takes before a demo slot is given up
    image_size: int = 64  # must match the input run's episodes

    def __post_init__(self) -> None:
        if self.budget < 1 or self.demos_per_round < 1 or self.eval_rollouts < 1:
            raise ValueError(f"budget, demos_per_round and eval_rollouts must be >= 1: {self}")
        # An unknown strategy or a bad gain fails here, not in round 1.
        AllocationConfig(strategy=self.targeted_allocation, min_gain=self.targeted_min_gain)


@dataclass
class Checkpoint:
    """Deployed success of one budget checkpoint (before coaching, then after each round)."""

    round: int  # rounds closed before it
    demos: int  # demos spent so far (subtask demos; (f): whole-task demos)
    demo_frames: int  # frames of those demos
    versions: dict[str, int]
    outcomes: dict[str, list[bool]] = field(default_factory=dict)  # composition -> success per eval seed
    first_failed: dict[str, list[int]] = field(default_factory=dict)  # composition -> per eval seed
    # composition -> per eval seed: the subtask the router timed out at (-1: none). Where it differs from
    # first_failed, the judge, not the expert, ended a subtask (summary._ending).
    timed_out: dict[str, list[int]] = field(default_factory=dict)
    unsupported: list[str] = field(default_factory=list)  # compositions without a policy: all failed
    seconds: float = 0.0


def compositions_of(robot: str, settings: RunSettings) -> tuple[list[Composition], list[Composition]]:
    """(training, held-out) compositions evaluated; training ones are also the ones coached."""
    train = [get_composition(robot, n) for n in settings.training] or training_compositions(robot)
    held = [get_composition(robot, n) for n in settings.held_out] or held_out_compositions(robot)
    return train, held


# ---------------------------------------------------------------------------------- experts
def _fit_shared_adapter(library: SharedAdapterPolicy, store: EpisodeStore, steps: int, seed: int) -> None:
    """The shared adapter starts at zero; fit it (and the heads) on the bootstrap demos, skill by skill
    in short turns so no skill is trained last for long (update_adapter trains one skill's batches)."""
    turns = 5
    for turn in range(turns):
        for skill in library.skills:
            dataset = EpisodeDataset(
                store,
                DatasetConfig(chunk_len=library.config.chunk_len, skill=skill, kind="demo", success=True,
                              pad_channels=True),
            )  # fmt: skip
            loader = DataLoader(
                dataset, batch_size=64, shuffle=True, generator=torch.Generator().manual_seed(seed + turn)
            )
            update_adapter(library, skill, loader, max(1, steps // turns), progress=False)


def _shared_library(experts: Path) -> SharedAdapterPolicy:
    """The shared-adapter policy on the bootstrap backbone, heads from the modular experts' registry."""
    base = load_backbone(experts / BACKBONE_DIR)
    library = SharedAdapterPolicy(base.config)
    library.backbone.load_state_dict(base.backbone.state_dict())
    registry = AdapterRegistry(experts / ADAPTERS_DIR)
    for skill in registry.skills():
        library.add_skill(skill)
    return library


def restore_shared(
    experts: Path, versions: Mapping[str, int] | None = None
) -> tuple[SharedAdapterPolicy, AdapterRegistry, dict[str, int]]:
    """Active versions of every skill (or `versions`, ACTIVE left as it is), the shared adapter from
    the most recently trained one.

    Every published version carries the shared adapter as it was; loading the one trained last
    (highest coach round, then the last skill of that round, as improve_experts trains in skill order)
    last leaves the live shared adapter the newest.
    """
    library, registry = _shared_library(experts), AdapterRegistry(experts / ADAPTERS_DIR)
    active = versions is None
    versions = {s: registry.active_version(s) for s in registry.skills()} if active else dict(versions)

    def trained(skill: str) -> tuple[float, str]:
        return registry.meta(skill, versions[skill]).metrics.get(ROUND_METRIC, -1.0), skill

    for skill in sorted(versions, key=trained):
        (registry.activate if active else registry.load)(library, skill, versions[skill])
    return library, registry, versions


def prepare(
    inputs: Path, run_dir: Path, method: Method, settings: RunSettings, seed: int, train: list[Composition]
) -> None:
    """The run's own experts and demo store, copied from the bootstrap (atomically: tmp, then rename);
    a baseline's policy is fitted on the bootstrap demos in the copy (`train`: (f)'s compositions)."""
    for name in ("episodes", "experts"):
        target = run_dir / name
        if target.exists():
            continue
        tmp = run_dir / f".{name}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(inputs / name, tmp)
        if name == "experts" and method.policy == PolicyKind.SHARED_ADAPTER:
            torch.manual_seed(seed)
            library = _shared_library(tmp)
            _fit_shared_adapter(library, EpisodeStore(run_dir / "episodes"), settings.shared_init_steps, seed)
            registry = AdapterRegistry(tmp / ADAPTERS_DIR)
            for skill in library.skills:
                registry.publish(library, skill, {"demos_used": 0, "metrics": {"shared_init": 1.0}})
        if name == "experts" and method.policy == PolicyKind.END_TO_END:
            torch.manual_seed(seed)
            init_end_to_end(
                tmp, EpisodeStore(run_dir / "episodes"), train, settings.end_to_end_init_steps, seed
            )
        tmp.rename(target)


def load_policy(
    experts: Path, method: Method, versions: Mapping[str, int] | None = None
) -> tuple[ChunkPolicy, dict[str, int]]:
    """The run's policy with its active versions (skill, or (f) composition -> version), or with
    `versions` (an earlier checkpoint's), leaving which ones are active as it is."""
    if method.policy == PolicyKind.END_TO_END:
        return load_end_to_end(experts, versions)
    if method.policy == PolicyKind.SHARED_ADAPTER:
        library, _, loaded = restore_shared(experts, versions)
        return library, loaded
    library, _, loaded, _ = load_experts(experts, versions)
    return library, loaded


# ---------------------------------------------------------------------------------- deployment
class Deployment:
    """Deploys a policy on the simulator as the executor runs it: the judge switches subtasks under
    its calibrated deadlines, the simulator's ground truth scores each trial. One per (run, arm); all
    a final evaluation needs, so it does not rebuild the run's coach."""

    def __init__(self, inputs: Path, robot: str, settings: RunSettings, device: torch.device) -> None:
        self.robot = robot
        self.train, self.held_out = compositions_of(robot, settings)
        self.detector_args, self.deadlines = judge_detector_args(inputs / "judge", robot, device)
        # opened last, so a judge that fails to load leaves nothing for close() to release
        self.scene = SimScene(SceneConfig(robot=robot, image_size=settings.image_size))

    def router(self, policy: SkillPolicy) -> Router:
        """The executor's router: the judge switches subtasks, deadlines as calibrated for it."""
        config = RouterConfig(
            detector="judge", skill_deadline_steps=self.deadlines.per_skill(self.robot, policy.skills())
        )
        return Router(policy, config, self.detector_args)

    def deploy(self, point: Checkpoint, library: ChunkPolicy, seeds: list[int]) -> Checkpoint:
        """Fill `point`'s outcomes: `library` at `point.versions`, one trial per composition and seed."""
        start = time.perf_counter()
        for composition in self.train + self.held_out:
            policy = skill_policy(library, composition, point.versions)
            if policy is None:  # never silently dropped: every trial counts as failed at subtask 0
                point.unsupported.append(composition.name)
                point.outcomes[composition.name] = [False] * len(seeds)
                point.first_failed[composition.name] = [0] * len(seeds)
                point.timed_out[composition.name] = [0] * len(seeds)
                continue
            result = evaluate(self.router(policy), self.scene, composition, seeds)
            point.outcomes[composition.name] = [bool(t.ground_truth["success"]) for t in result.trials]
            point.first_failed[composition.name] = [
                int(t.ground_truth["first_failed"]) for t in result.trials
            ]
            point.timed_out[composition.name] = [t.timed_out_index for t in result.trials]
        point.seconds = time.perf_counter() - start
        return point

    def close(self) -> None:
        self.scene.close()


def skill_policy(
    library: ChunkPolicy, composition: Composition, versions: dict[str, int]
) -> SkillPolicy | None:
    """What runs `composition`: the experts, or (f) its own policy (None: it has none)."""
    if not isinstance(library, EndToEndPolicy):
        return LibraryPolicy(library, versions)
    if composition.name not in library.skills:
        return None
    return CompositionPolicy(library, composition, versions)


# ---------------------------------------------------------------------------------- the run
class _Run:
    """The live pieces of one run; `checkpoint(k)` evaluates the policy as it is now."""

    def __init__(
        self, inputs: Path, run_dir: Path, spec: RunSpec, settings: RunSettings, starts: Path | None
    ) -> None:
        self.spec, self.settings, self.run_dir, self.starts = spec, settings, run_dir, starts
        self.method = METHODS[spec.method]
        self.train, self.held_out = compositions_of(spec.robot, settings)
        prepare(inputs, run_dir, self.method, settings, spec.seed, self.train)
        # one device for every model of the run: adapter updates move the policy to `select_device`
        self.device = select_device()
        self.library, versions = load_policy(run_dir / "experts", self.method)
        self.library.to(self.device)
        self.store = EpisodeStore(run_dir / "episodes")
        # after prepare(), which reseeds torch for (a, b, f): the judge draws from the same stream as before
        self.deployment = Deployment(inputs, spec.robot, settings, self.device)
        self.scene = self.deployment.scene  # the operator's and imagination's scene too
        self.eval_seeds = evaluation_seeds(settings.eval_rollouts)
        schedule = CoachConfig(  # every method's: budget, rounds, update steps and replay
            budget=settings.budget,
            demos_per_round=settings.demos_per_round,
            improve=ImproveConfig(
                steps=settings.adapter_steps, dense_steps=settings.dense_steps, seed=spec.seed
            ),
            acceptance=AcceptanceConfig(trials=settings.check_trials),
        )
        station = ScriptedSessionConfig(settings.max_takes_per_demo, seed=spec.seed)
        self.calibration = target_calibration(inputs, self.method, settings)
        self.teacher: Coach | WholeTaskTeacher
        if self.method.policy == PolicyKind.END_TO_END:
            frames = frames_per_subtask_demo(self.store, spec.robot, self.train)
            whole_task = WholeTaskState.open(run_dir / WHOLE_TASK_STATE_FILE, frames, versions)
            self.teacher = WholeTaskTeacher(
                schedule, whole_task, self.library, self.train, self.store, self.scene, run_dir / "experts",
                station,
            )  # fmt: skip
        else:
            config = replace(
                schedule,
                diagnosis=DiagnosisConfig(min_reach=1 if self.method.blind else settings.min_reach),
                allocation=allocation_config(self.method, settings),
            )
            registry = AdapterRegistry(run_dir / "experts" / ADAPTERS_DIR)
            ports = LocalPorts(
                self._targets(inputs), ScriptedSession(self.scene, self.store, station), spec.robot,
                self._router, self.scene,
            )  # fmt: skip
            coach = CoachState.open(run_dir / STATE_FILE, settings.budget, versions, spec.run_id)
            self.teacher = Coach(
                config, coach, self.train, self.library, registry, self.store, ports, self.calibration
            )
        self.state = self.teacher.state

    def frames(self, episode_ids: Iterable[str]) -> int:
        return sum(self.store.meta(e).length for e in episode_ids)

    def _targets(self, inputs: Path) -> TargetSource:
        s, seed = self.settings, self.spec.seed
        seeds = imagination_seeds(s.initial_states)
        if self.method.targets == Targets.WORLD_MODEL:
            world, _ = load_world(inputs / "world", self.device)
            imagination = ImaginationConfig(
                num_rollouts=s.imagined_rollouts, num_world_seeds=s.num_world_seeds,
                agreement=min(2, s.num_world_seeds), horizon=s.horizon, seed=seed,
            )  # fmt: skip
            detector_args = self.deployment.detector_args
            return WorldModelTargets(
                world, detector_args["judge"], detector_args["verdict"], self.deployment.deadlines,
                self.library, InitialObservations(self.scene, seeds), imagination,
            )  # fmt: skip
        if self.method.targets == Targets.DEPLOYED:
            return DeployedTargets(self._router, self.scene, seeds)
        return PriorTargets(self.method.targets == Targets.RANDOM, seeds, seed, s.imagined_rollouts)

    def _router(self, versions: dict[str, int]) -> Router:
        """The executor's router over the run's experts at `versions`."""
        return self.deployment.router(LibraryPolicy(self.library, versions))

    def checkpoint(self, index: int) -> Checkpoint:
        path = self.run_dir / "eval" / f"round_{index}.json"
        if path.exists():
            return Checkpoint(**json.loads(path.read_text()))
        if index == 0 and self.starts is not None:
            folder = self.starts / self.method.start_key(self.spec.robot, self.spec.seed)
            point = shared_evaluation(folder, lambda: self._evaluate(0))
            expected = {c.name: len(self.eval_seeds) for c in self.train + self.held_out}
            if {name: len(v) for name, v in point.outcomes.items()} != expected:
                raise ValueError(
                    f"{folder} was evaluated on other compositions or seeds than this run's {expected}: "
                    "an experiment's output folder holds one profile; choose a fresh --output"
                )
        else:
            point = self._evaluate(index)
        replace_file_atomically(path, json_bytes(asdict(point)))
        return point

    def _evaluate(self, index: int) -> Checkpoint:
        """The policy as it is now, on the run's evaluation seeds."""
        ids = self.state.received_ids()
        point = Checkpoint(index, len(ids), self.frames(ids), dict(self.state.adapter_versions))
        return self.deployment.deploy(point, self.library, self.eval_seeds)


def final_evaluation(
    inputs: Path,
    run_dir: Path,
    spec: RunSpec,
    settings: RunSettings,
    rollouts: int,
    starts: Path | None = None,
) -> dict:
    """A finished run's first and last checkpoints on `rollouts` initial states per composition: the
    curve's `settings.eval_rollouts` read back, the rest (`evaluation_seeds(rollouts)`'s tail) deployed.

    The curve's few states per checkpoint show the trend; where a run starts and ends is tested here,
    on enough states to separate methods. Each tail is its own file (`eval/final_<n>.json` and
    `_start.json`; the start evaluated once in `starts`, shared like the curve's budget 0), so a
    finished one is read back and the run's settings, curve and result stay as they were. Returns
    {"eval_seeds", "seconds", "start", "checkpoint"}: the pooled first and last Checkpoints, outcomes in
    seed order.
    """
    run_dir = Path(run_dir)
    if rollouts <= settings.eval_rollouts:
        raise ValueError(
            f"final evaluation needs more than the curve's {settings.eval_rollouts} states, got {rollouts}"
        )
    if not (run_dir / DONE_FILE).exists():
        raise ValueError(f"{run_dir} has not finished: its final checkpoint is not there to evaluate")
    curve = [Checkpoint(**p) for p in json.loads((run_dir / RESULT_FILE).read_text())["checkpoints"]]
    seeds, name, live = evaluation_seeds(rollouts)[settings.eval_rollouts :], f"final_{rollouts}", []
    method, device = METHODS[spec.method], select_device()

    def tail(point: Checkpoint) -> Checkpoint:
        """`point`'s policy, at its versions, loaded afresh from the run's experts, on `seeds`."""
        if not live:  # built once, only when something is left to deploy
            torch.set_num_threads(1)
            live.append(Deployment(Path(inputs), spec.robot, settings, device))
        library, _ = load_policy(run_dir / "experts", method, point.versions)
        library.to(device)
        again = Checkpoint(point.round, point.demos, point.demo_frames, dict(point.versions))
        return live[0].deploy(again, library, seeds)

    def first() -> Checkpoint:  # the run keeps its own copy, as `_Run.checkpoint` does the curve's budget 0
        if starts is None:
            return tail(curve[0])
        return shared_evaluation(
            starts / method.start_key(spec.robot, spec.seed), lambda: tail(curve[0]), name
        )

    start = _evaluated_once(run_dir / "eval" / f"{name}_start.json", first)
    final = _evaluated_once(run_dir / "eval" / f"{name}.json", lambda: tail(curve[-1]))
    if live:
        live[0].close()
    return {
        "eval_seeds": evaluation_seeds(rollouts),
        "seconds": start.seconds + final.seconds,
        "start": asdict(_pooled(curve[0], start)),
        "checkpoint": asdict(_pooled(curve[-1], final)),
    }


def _evaluated_once(path: Path, evaluate_it: Callable[[], Checkpoint]) -> Checkpoint:
    """The checkpoint in `path`, or `evaluate_it()`, written there atomically."""
    if path.exists():
        return Checkpoint(**json.loads(path.read_text()))
    point = evaluate_it()
    replace_file_atomically(path, json_bytes(asdict(point)))
    return point


def _pooled(curve: Checkpoint, tail: Checkpoint) -> Checkpoint:
    """One checkpoint's curve outcomes followed by its tail's: every per-trial list, in seed order."""
    if tail.versions != curve.versions:
        raise ValueError(f"evaluated versions {tail.versions}, the checkpoint's are {curve.versions}")
    pooled = replace(tail)
    for field_name in ("outcomes", "first_failed", "timed_out"):
        mine, more = getattr(curve, field_name), getattr(tail, field_name)
        setattr(pooled, field_name, {c: mine[c] + more[c] for c in mine})
    return pooled


def shared_evaluation(
    folder: Path, evaluate_start: Callable[[], Checkpoint], name: str = "round_0"
) -> Checkpoint:
    """The budget-0 checkpoint of `folder`'s runs (`name`: which evaluation of it), evaluated by the
    first to ask, read back by the rest.

    Runs that start from the same policy, evaluated on the same seeds, would compute the same
    numbers; a lock file serialises parallel workers, so one evaluates and the others wait and read.
    A reader's copy has seconds 0: it spent nothing.
    """
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json"
    with open(folder / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if path.exists():
            return replace(Checkpoint(**json.loads(path.read_text())), seconds=0.0)
        point = evaluate_start()
        replace_file_atomically(path, json_bytes(asdict(point)))
        return point


def target_calibration(inputs: Path, method: Method, settings: RunSettings) -> ImaginationCalibration | None:
    """The calibration `method`'s diagnosis runs with: the inputs' (offboard stage, step 5) for
    world-model targets under `settings.calibrated_targets`; None where they have none."""
    path = Path(inputs) / CALIBRATION_FILE
    if method.targets != Targets.WORLD_MODEL or not settings.calibrated_targets or not path.exists():
        return None
    return ImaginationCalibration.load(path)


def allocation_config(method: Method, settings: RunSettings) -> AllocationConfig:
    """How `method` splits a round: its strategy, and the set-aside gain where rollouts stand behind its
    records (a blind method's records are priors: no gain to judge)."""
    return AllocationConfig(
        strategy=method.strategy(settings.targeted_allocation),
        min_gain=settings.targeted_min_gain if method.judges_gain else None,
    )


def _claim_settings(run_dir: Path, settings: RunSettings, method: Method) -> None:
    """Tie `run_dir` to `settings`: reading it back or resuming it under other settings is an error,
    so a changed option (say `--allocation`) never reports runs made without it. Settings `method`
    does not read are not compared: uniform acquisition runs the same whatever the targeted methods
    allocate by, so one report may hold its runs beside targeted runs of any allocation."""
    path, mine = run_dir / SETTINGS_FILE, json.loads(json_bytes(asdict(settings)))
    if not path.exists():
        replace_file_atomically(path, json_bytes(mine))
        return
    theirs = {**SETTINGS_BEFORE, **json.loads(path.read_text())}
    unread = set()
    if method.allocation != TARGETED:  # (a, e, f)
        unread.add("targeted_allocation")
    if not method.judges_gain:  # (a, c, e, f)
        unread.add("targeted_min_gain")
    if method.targets != Targets.WORLD_MODEL:  # (a, c, e, f, g)
        unread.add("calibrated_targets")
    changed = {k: (theirs.get(k), v) for k, v in mine.items() if k not in unread and theirs.get(k) != v}
    if changed:
        raise ValueError(
            f"{run_dir} was started with other settings ({changed}, as (then, now)): "
            "write to another --output, or rerun with the settings it was started with"
        )


def run_one(
    inputs: Path, run_dir: Path, spec: RunSpec, settings: RunSettings, starts: Path | None = None
) -> dict:
    """Run (or resume, or just read back) one run; returns what result.json holds.

    `starts`: a folder shared by the runs of one experiment (same inputs and settings), where runs
    that start from the same policy share its budget-0 evaluation (`shared_evaluation`).
    """
    run_dir = Path(run_dir)
    _claim_settings(run_dir, settings, METHODS[spec.method])
    if (run_dir / DONE_FILE).exists():
        return json.loads((run_dir / RESULT_FILE).read_text())
    torch.set_num_threads(1)
    torch.manual_seed(spec.seed)
    run_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    run = _Run(Path(inputs), run_dir, spec, settings, starts)
    # Invariant: checkpoint k is evaluated before round k+1 takes its first step, so on resume the
    # active adapters are those of the newest checkpoint whenever its evaluation is missing.
    points = [run.checkpoint(k) for k in range(run.state.round + 1)]
    phases: Counter[str] = Counter()  # seconds per coach phase (Action), this process's share
    while not run.teacher.finished:
        closed, tic = run.state.round, time.perf_counter()
        phases[str(run.teacher.step())] += time.perf_counter() - tic
        if run.state.round > closed:
            points.append(run.checkpoint(run.state.round))
    run.deployment.close()
    result = {
        "method": spec.method,
        "robot": spec.robot,
        "seed": spec.seed,
        "settings": asdict(settings),
        "calibrated_targets": run.calibration is not None,  # diagnosed with the inputs' calibration
        "training": [c.name for c in run.train],
        "held_out": [c.name for c in run.held_out],
        "subtasks": {c.name: [str(s) for s in c.subtasks] for c in (*run.train, *run.held_out)},
        "eval_seeds": run.eval_seeds,
        "demos": run.state.demos_spent,
        "demo_frames": points[-1].demo_frames,
        "checkpoints": [asdict(p) for p in points],
        "rounds": [  # frame_budget: (f)'s frames for the round; null where the budget is in subtask demos
            {
                "round": h["round"],
                "strategy": h["allocation"].get("strategy"),
                "allocation": h["allocation"].get("demos", []),
                "improved": h["improved"],
                "checks": h.get("checks", {}),  # acceptance checks (coach.acceptance), by skill
                "demo_frames": run.frames(e for r in h["requests"] for e in r["episode_ids"]),
                "frame_budget": h.get("frame_budget"),
            }
            for h in run.state.history
        ],
        "seconds": time.perf_counter() - start,  # this process's share (a resumed run counts again)
        # where they went: imagine (the oracle's deployed targets too), collect, improve, evaluate
        "phase_seconds": {**phases, "evaluate": sum(p.seconds for p in points)},
    }
    (run_dir / RESULT_FILE).write_bytes(json_bytes(result))
    (run_dir / DONE_FILE).write_text("done\n")
    return result

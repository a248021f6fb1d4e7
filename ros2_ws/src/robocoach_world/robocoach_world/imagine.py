"""Imagine: experts act on CoachWorld's frames, CoachWorld answers, the judge diagnoses; all batched.

For one composition, every trial starts from a real initial observation (camera frame + joint
positions) and is rolled out `num_world_seeds` times with different world-model noise. Each row of
the batch is one (trial, world seed): the router's rule runs per row (the active subtask's expert
acts; the judge's done rule switches to the next subtask; a subtask that outlives its deadline fails
the row), and the model answers every row at once. A trial's diagnosis is the first failed subtask
that at least `agreement` of its seeds report; where no such majority exists the trial is invalid
and the coach does not count it.

    trials = imagine_composition(world, judge, library, deadlines, composition, images, proprio,
                                 ImaginationConfig(num_rollouts=64))
    records = [t.record for t in trials]      # TrialRecords for the coach
    shown = failure_examples(trials, 2)       # with keep_frames: the trials worth showing as clips
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np
import torch

from robocoach_skills import action_contract
from robocoach_skills.composition import Composition
from robocoach_skills.constants import (
    KEY_ARGUMENTS,
    KEY_ROBOT_ID,
    KEY_SUBTASK_START_KEYPOINTS,
    OBS_IMAGE,
    OBS_PROPRIO,
)
from robocoach_skills.device import fast_dtype
from robocoach_skills.experts.model import ChunkPolicy
from robocoach_skills.sim.arms import clip_joint_commands, get_arm
from robocoach_skills.skill_policy import ChunkExecutionConfig
from robocoach_world.judge.model import ProgressJudge
from robocoach_world.judge.verdict import NEVER, BatchedJudge, Deadlines, DoneRule, VerdictConfig
from robocoach_world.records import SOURCE_IMAGINED, TrialRecord
from robocoach_world.world.model import CoachWorld, WorldState

IMAGINATION_SEED_BASE = 2_000_000  # initial states the coach imagines from; apart from evaluation seeds
INITIAL_STATES = 8  # real initial observations a coach imagines each composition from, by default


def imagination_seeds(n: int) -> list[int]:
    """The seeds of the n real initial observations a coach imagines each composition from."""
    return list(range(IMAGINATION_SEED_BASE, IMAGINATION_SEED_BASE + n))


@dataclass(frozen=True)
class ImaginationConfig:
    num_rollouts: int = 64  # imagined trials, spread round-robin over the initial observations
    num_world_seeds: int = 3  # world-model noise samples per trial
    agreement: int = 2  # seeds that must report the same first failure for a trial to count
    horizon: int = 300  # most policy steps a trial may take, all subtasks together
    n_action_steps: int = ChunkExecutionConfig.n_action_steps  # as on the robot (LibraryPolicy)
    seed: int = 0  # seeds the world-model noise
    keep_frames: bool = False  # keep the imagined frames of one seed per trial (clips, the Imagine result)
    fast_frames: bool = True  # decode frames in the device's native reduced precision (`fast_dtype`), if any

    def __post_init__(self) -> None:
        if self.num_rollouts < 1 or self.num_world_seeds < 1 or self.horizon < 1 or self.n_action_steps < 1:
            raise ValueError(f"ImaginationConfig sizes must be >= 1: {self}")
        if not 1 <= self.agreement <= self.num_world_seeds:
            raise ValueError(
                f"agreement must be in 1..num_world_seeds={self.num_world_seeds}, got {self.agreement}"
            )


@dataclass
class SeedOutcome:
    """One (trial, world seed) row after imagination, judged the way recorded video is."""

    first_failed: int  # -1 when every subtask was judged done in time
    progress: list[float]  # per subtask: judged progress when it ended
    switch_times: list[float]  # per subtask: judged done time [s], NEVER if not
    steps: int  # policy steps the row ran


@dataclass
class ImaginedTrial:
    record: TrialRecord
    seeds: list[SeedOutcome]  # one per world seed
    confidence: float  # fraction of seeds agreeing with the diagnosis
    frames: np.ndarray | None = None  # (T, H, W, 3) uint8 of the first agreeing seed, with keep_frames
    trace: np.ndarray | None = None  # (T,) judged progress of that seed's active subtask, with keep_frames
    active: np.ndarray | None = None  # (T,) index of that seed's judged-active subtask, with keep_frames


class _Rows:
    """Per-row bookkeeping of the router's rule for a batch of imagined rollouts."""

    def __init__(self, composition: Composition, n_rows: int, deadlines: Deadlines) -> None:
        subtasks = composition.subtasks
        self.n_subtasks = len(subtasks)
        self.deadline = np.array([deadlines.of(composition.robot, s.skill) for s in subtasks])
        self.index = np.zeros(n_rows, dtype=np.int64)  # active subtask per row
        self.start = np.zeros(n_rows, dtype=np.int64)  # step at which it started
        self.failed = np.full(n_rows, -1, dtype=np.int64)  # subtask that missed its deadline
        self.progress = np.zeros((n_rows, self.n_subtasks), dtype=np.float32)
        self.switch = np.full((n_rows, self.n_subtasks), NEVER, dtype=np.float32)
        self.steps = np.zeros(n_rows, dtype=np.int64)

    @property
    def running(self) -> np.ndarray:
        return (self.index < self.n_subtasks) & (self.failed < 0)

    def outcome(self, row: int) -> SeedOutcome:
        failed = int(self.failed[row]) if self.failed[row] >= 0 else int(self.index[row])
        first_failed = -1 if failed >= self.n_subtasks else failed
        return SeedOutcome(
            first_failed, self.progress[row].tolist(), self.switch[row].tolist(), int(self.steps[row])
        )


@torch.no_grad()
def imagine_composition(
    world: CoachWorld,
    judge: ProgressJudge,
    library: ChunkPolicy,
    deadlines: Deadlines,
    composition: Composition,
    initial_images: np.ndarray,
    initial_proprio: np.ndarray,
    config: ImaginationConfig,
    versions: Mapping[str, int] | None = None,
    initial_seeds: list[int] | None = None,
    verdict: VerdictConfig | None = None,
    fps: float = 10.0,
    on_step: Callable[[int, int, torch.Tensor], None] | None = None,
) -> list[ImaginedTrial]:
    """Imagine `config.num_rollouts` trials of `composition` from real initial observations.

    initial_images (N, H, W, 3) uint8 and initial_proprio (N, native_dim) are one real observation
    per initial state (its seed in `initial_seeds`, for the records). `on_step(step, finished_trials,
    frames)` sees every imagined step, frames (B, H, W, 3) uint8 row-major (row = trial * seeds + seed),
    to report progress or show frames; it may raise to cancel.
    """
    robot, subtasks = composition.robot, composition.subtasks
    missing = [s.skill for s in subtasks if s.skill not in library.skills]
    if missing:
        raise ValueError(
            f"no expert for {missing} in {composition.name!r}; experts: {', '.join(library.skills)}"
        )
    n_states = len(initial_images)
    if n_states == 0 or len(initial_proprio) != n_states:
        raise ValueError(
            f"need matching initial images and proprio, got {n_states} and {len(initial_proprio)}"
        )
    seeds_of_states = list(initial_seeds) if initial_seeds is not None else list(range(n_states))
    n_trials, n_seeds = config.num_rollouts, config.num_world_seeds
    n_rows = n_trials * n_seeds
    state_of_row = np.repeat(np.arange(n_trials) % n_states, n_seeds)  # row = trial * n_seeds + seed
    device = world.device
    rid = action_contract.robot_id(robot)
    robot_ids = torch.full((n_rows,), rid, dtype=torch.long, device=device)

    images = torch.as_tensor(initial_images[state_of_row], device=device)  # (B, H, W, 3) uint8
    padded = action_contract.pad(robot, np.asarray(initial_proprio, dtype=np.float32))
    proprio = torch.as_tensor(padded[state_of_row], device=device)  # (B, 8)
    world_state = world.observe(images[:, None], proprio[:, None], robot_ids)
    memory = _Memory(images.clone(), np.zeros(n_rows, dtype=bool))  # the experts' object memory
    generator = torch.Generator(device=device).manual_seed(config.seed)

    rows = _Rows(composition, n_rows, deadlines)
    online = BatchedJudge(judge, n_rows)
    online.reset_rows(range(n_rows), [subtasks[0]] * n_rows, robot)
    rule = DoneRule(verdict or VerdictConfig(), n_rows)
    skills = [s.skill for s in subtasks]
    per_chunk = min(config.n_action_steps, library.config.chunk_len)  # as LibraryPolicy: at most a chunk
    queue = torch.zeros((n_rows, per_chunk, action_contract.ACTION_DIM), device=device)
    queued = np.zeros(n_rows, dtype=np.int64)  # actions left in each row's queue
    arguments = torch.tensor([action_contract.argument_ids(s) for s in subtasks], device=device)
    kept = _FrameKeeper(n_trials, n_seeds, config.keep_frames)
    frame_dtype = fast_dtype(device) if config.fast_frames else None

    for step in range(config.horizon):
        running = rows.running
        if not running.any():
            break
        observed = _Observed(images, memory, proprio, robot_ids, arguments)
        _refill(library, queue, queued, rows, running, observed, subtasks)
        position = np.minimum(per_chunk - queued, per_chunk - 1)  # next queued action
        actions = queue[torch.arange(n_rows, device=device), torch.as_tensor(position, device=device)]
        actions = _applied(robot, actions, proprio, 1.0 / fps)
        queued -= running
        live = None if running.all() else np.nonzero(running)[0]  # rows whose trial has ended stand still
        world_state, images, proprio = _step_world(
            world, world_state, actions, robot_ids, generator, frame_dtype, live, images, proprio
        )
        kept.add(images, running)
        progress = online.update(images, proprio, live)  # as the router's detector: after each action only
        active_skills = [skills[i] for i in np.minimum(rows.index, rows.n_subtasks - 1)]
        # CoachWorld's predicted reading and the expert's command, for the grasp check: one copy (a GPU sync)
        gripper, command = torch.stack([proprio[:, -1].float(), actions[:, -1].float()]).cpu().numpy()
        done = rule.update(online.done, active_skills, gripper, command) & running
        rows.steps[running] += 1
        active = np.nonzero(running)[0]
        rows.progress[active, rows.index[active]] = progress[active]
        kept.trace(progress, rows.index, running)
        for row in np.nonzero(done)[0]:
            i = rows.index[row]
            rows.switch[row, i] = (step + 1) / fps
            rows.index[row], rows.start[row], queued[row] = i + 1, step + 1, 0
            memory.forget(row, images[row])
            if i + 1 < rows.n_subtasks:
                online.reset_rows([row], [subtasks[i + 1]], robot)
                rule.reset_rows([row])
        late = rows.running & (
            step + 1 - rows.start >= rows.deadline[np.minimum(rows.index, rows.n_subtasks - 1)]
        )
        rows.failed[late] = rows.index[late]
        if on_step is not None:
            finished = int((~rows.running.reshape(n_trials, n_seeds)).all(axis=1).sum())
            on_step(step + 1, finished, images)

    trials = []
    for trial in range(n_trials):
        outcomes = [rows.outcome(trial * n_seeds + s) for s in range(n_seeds)]
        first_failed, count = majority([o.first_failed for o in outcomes])
        state = int(state_of_row[trial * n_seeds])
        record = TrialRecord.of_route(
            composition, versions or {}, first_failed, state, seeds_of_states[state], SOURCE_IMAGINED,
            valid=count >= config.agreement,
        )  # fmt: skip
        agreeing = next(s for s, o in enumerate(outcomes) if o.first_failed == first_failed)
        trials.append(ImaginedTrial(record, outcomes, count / n_seeds, *kept.get(trial, agreeing)))
    return trials


def failure_examples(trials: Sequence[ImaginedTrial], per_subtask: int) -> list[int]:
    """Indices of the first `per_subtask` valid failed trials of each first-failed subtask.

    The trials whose frames become failure clips for the operator. Trial order goes round-robin over
    the initial states, so the clips come from different initial states where the failures allow;
    and it is deterministic, so the world model node and the in-process ports pick the same trials.
    """
    taken: Counter[int] = Counter()
    examples = []
    for k, trial in enumerate(trials):
        record = trial.record
        if record.valid and not record.success and taken[record.first_failed_index] < per_subtask:
            taken[record.first_failed_index] += 1
            examples.append(k)
    return examples


def majority(first_failures: list[int]) -> tuple[int, int]:
    """(most reported first failed subtask, how many seeds reported it); ties go to the earliest failure.

    >>> majority([1, 1, -1])
    (1, 2)
    >>> majority([0, 1, -1])
    (0, 1)
    """
    votes = Counter(first_failures)
    best = max(votes.values())
    tied = [f for f, n in votes.items() if n == best]
    failures = [f for f in tied if f >= 0]
    return (min(failures) if failures else -1), best


def _applied(robot: str, actions: torch.Tensor, proprio: torch.Tensor, dt: float) -> torch.Tensor:
    """(B, 8) commands -> what the robot would apply from the (B, 8) imagined proprio: every robot clips
    to its velocity and position limits and the gripper to [0, 1] (`robots.base`), and CoachWorld
    learned from applied actions. Unclipped, an expert's gripper command of -1 drove the predicted
    reading to -1 and the hand rose twice as high as deployed (session 34)."""
    arm = get_arm(robot)
    native = action_contract.unpad(robot, actions.float().cpu().numpy())
    current = action_contract.unpad(robot, proprio.float().cpu().numpy())[:, : arm.n_joints]
    applied = action_contract.pad(robot, clip_joint_commands(arm, native, current, dt).astype(np.float32))
    return torch.as_tensor(applied, device=actions.device, dtype=actions.dtype)


def _step_world(
    world: CoachWorld,
    state: WorldState,
    actions: torch.Tensor,
    robot_ids: torch.Tensor,
    generator: torch.Generator,
    frame_dtype: torch.dtype | None,
    live: np.ndarray | None,
    images: torch.Tensor,
    proprio: torch.Tensor,
) -> tuple[WorldState, torch.Tensor, torch.Tensor]:
    """One imagined step of the rows in `live` (None: all) -> (state, images (B, ...), proprio (B, 8)).

    Rows outside `live` keep their state, frame and proprio: once most trials have ended, a step
    costs only what the running ones need.
    """
    if live is None:
        state, frames, proprio_k = world.imagine(state, actions[:, None], robot_ids, generator, frame_dtype)
        return state, frames[:, 0], proprio_k[:, 0]
    index = torch.as_tensor(live, device=robot_ids.device)
    stepped, frames, proprio_k = world.imagine(
        state.select(index), actions[index, None], robot_ids[index], generator, frame_dtype
    )
    h, images, proprio = state.h.clone(), images.clone(), proprio.clone()
    h[index], images[index], proprio[index] = stepped.h, frames[:, 0], proprio_k[:, 0]
    return replace(state, h=h), images, proprio  # grasp draws stay as the first call made them


class _Memory:
    """Each row's active subtask's first frame (B, H, W, 3) uint8, and its keypoints once an expert has
    looked at it: computed at the row's first refill in that subtask, read at every later one."""

    def __init__(self, start_images: torch.Tensor, remembered: np.ndarray) -> None:
        self.start_images, self.remembered = start_images, remembered
        self.keypoints: torch.Tensor | None = None  # (B, 2C), rows valid where remembered

    def forget(self, row: int, image: torch.Tensor) -> None:
        """`row` switched subtask: `image` is its new first frame."""
        self.start_images[row], self.remembered[row] = image, False

    def keypoints_of(self, library: ChunkPolicy, rows: np.ndarray, skill: str) -> torch.Tensor:
        """The first-frame keypoints of `rows`, all running `skill`."""
        new = rows[~self.remembered[rows]]
        if len(new):
            index = torch.as_tensor(new, device=self.start_images.device)
            frames = self.start_images[index].permute(0, 3, 1, 2).float() / 255.0
            seen = library.start_keypoints(frames, skill)  # (N, 2C)
            if self.keypoints is None:
                self.keypoints = seen.new_zeros(len(self.remembered), seen.shape[1])
            self.keypoints[index.to(seen.device)] = seen  # (the library's device)
            self.remembered[new] = True
        return self.keypoints[torch.as_tensor(rows, device=self.keypoints.device)]


class _Observed(NamedTuple):
    """What the experts read of every row: frames (B, H, W, 3) uint8, the subtasks' first frames, proprio
    (B, 8), robot ids (B,), and each subtask's argument ids (n_subtasks, 2)."""

    images: torch.Tensor
    memory: _Memory
    proprio: torch.Tensor
    robot_ids: torch.Tensor
    arguments: torch.Tensor


def _refill(
    library: ChunkPolicy,
    queue: torch.Tensor,
    queued: np.ndarray,
    rows: _Rows,
    running: np.ndarray,
    observed: _Observed,
    subtasks,
) -> None:
    """Ask each running row's active expert for a new chunk where the row's queue is empty."""
    need = running & (queued == 0)
    for index in np.unique(rows.index[need]):
        group = np.nonzero(need & (rows.index == index))[0]
        sel = torch.as_tensor(group, device=queue.device)
        obs = {
            OBS_IMAGE: observed.images[sel].permute(0, 3, 1, 2).float() / 255.0,
            OBS_PROPRIO: observed.proprio[sel],
            KEY_ROBOT_ID: observed.robot_ids[sel],
            KEY_ARGUMENTS: observed.arguments[index].expand(len(group), -1),
        }
        skill = subtasks[index].skill
        if library.config.argument_memory:
            obs[KEY_SUBTASK_START_KEYPOINTS] = observed.memory.keypoints_of(library, group, skill)
        chunk, _ = library.select_action(obs, skill)  # (G, K, 8)
        queue[sel] = chunk[:, : queue.shape[1]].to(queue.dtype)
        queued[group] = queue.shape[1]


class _FrameKeeper:
    """Frames, judged progress and judged-active subtask of every row while it runs, only when asked to.

    Every seed's frames are held until the end, since which seed agrees is known only then; the
    caller keeps those of the trials it shows (`failure_examples`) and drops the rest.
    """

    def __init__(self, n_trials: int, n_seeds: int, enabled: bool) -> None:
        self.n_seeds, self.enabled = n_seeds, enabled
        rows = n_trials * n_seeds if enabled else 0
        self.frames: list[list[np.ndarray]] = [[] for _ in range(rows)]
        self.traces: list[list[float]] = [[] for _ in range(rows)]
        self.active: list[list[int]] = [[] for _ in range(rows)]

    def add(self, images: torch.Tensor, running: np.ndarray) -> None:
        if self.enabled:
            array = images.cpu().numpy()
            for row in np.nonzero(running)[0]:
                self.frames[row].append(array[row])

    def trace(self, progress: np.ndarray, active: np.ndarray, running: np.ndarray) -> None:
        if self.enabled:
            for row in np.nonzero(running)[0]:
                self.traces[row].append(float(progress[row]))
                self.active[row].append(int(active[row]))

    def get(self, trial: int, seed: int) -> tuple[np.ndarray | None, np.ndarray | None, np.ndarray | None]:
        """(frames (T, H, W, 3), trace (T,), active (T,)) of one row; Nones when not keeping."""
        if not self.enabled:
            return None, None, None
        row = trial * self.n_seeds + seed
        return (
            np.stack(self.frames[row]),
            np.asarray(self.traces[row], dtype=np.float32),
            np.asarray(self.active[row], dtype=np.int64),
        )

"""From judged progress to verdicts: the done rule, per-(arm, skill) deadlines, and whole-video judging.

One rule everywhere (imagination, the robot's router, judging recorded video): a subtask counts as
done once the judge's done score stays at or above `threshold` for `consecutive` steps (both may be
set per skill); the next subtask's history starts at the following frame. A grasp (`grasp_skills`)
also needs the gripper to say the fingers hold something for those steps: its reading in the range of
a held cube and wider than commanded, since something keeps them open; a release (`release_skills`, the
place) needs it to read wider than a held cube. Frames, imagined ones above all, can show a cube in hand
that the fingers closed past (docs/benchmarks.md, session 28), and a reading alone passes through that
range as fingers that closed on nothing open again (session 40). A subtask not done within its deadline
(policy steps since it started) fails, and the first such subtask names the failing (subtask, expert)
pair.
Deadlines are calibrated once, on held-out successful demos, from the judge's own completion times,
then frozen to JSON, so imagination and deployment are held to the same clock.

    judge = load_judge(Path("runs/judge"))
    deadlines = Deadlines.load(Path("runs/judge/deadlines.json"))
    verdict = judge_episode(judge, episode, deadlines)   # episode: anything with images/composition/fps

Worked example of the rule, threshold 0.9 and 2 consecutive steps:

>>> rule = DoneRule(VerdictConfig(threshold=0.9, consecutive=2), rows=1)
>>> [bool(rule.update(np.array([p]))[0]) for p in (0.5, 0.95, 0.8, 0.92, 0.97)]
[False, False, False, False, True]
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np
import torch

from robocoach_skills.action_contract import pad
from robocoach_skills.composition import Composition, Subtask
from robocoach_world.judge.model import COND_SKILL, DONE, PROGRESS, ProgressJudge

NEVER = -1.0  # switch time of a subtask that was never detected done
# Judged completions a (robot, skill) needs for a calibrated deadline. A Franka judge confirmed 1 of
# its 10 scripted pick demos before the video ended; that one fast pick made the pick's deadline 71
# steps, shorter than any expert pick took, and every deployed pick failed by it (session 32).
MIN_DEADLINE_SAMPLES = 3


@dataclass(frozen=True)
class VerdictConfig:
    """The done rule shared by imagination, the router and recorded-video judging."""

    threshold: float = 0.9  # judged done probability that counts as done
    consecutive: int = 2  # steps in a row at or above the threshold (one noisy frame never switches)
    grasp_skills: tuple[str, ...] = ("pick",)  # done only while the gripper reading is in `holding`
    # gripper readings (proprio's last channel: 0 closed .. 1 open) of fingers holding a cube: the
    # 4 cm cubes read 0.45 on Franka and 0.53 on PiPER, closed on nothing 0, open 0.8-1
    holding: tuple[float, float] = (0.2, 0.7)
    # ... and at least this much wider than the gripper was commanded to be: closed on a cube, a pick
    # reads 0.45 (Franka) commanded 0; open or opening, a reading is at or below its command. Coached pick
    # experts that missed, then opened to try again, were confirmed on the way in 16 of 20 wrong
    # confirmations of 28 deployed picks without this (docs/results.md, session 40).
    held_open: float = 0.1
    # done only once the gripper reads wider than any held cube (above `holding`): a place whose cube is
    # in the bin in the frames but still in the fingers is not done. In all 13 wrong place confirmations
    # of a coached Franka checkpoint, replayed, the gripper read 0.20-0.58, the cube in both fingers in 11
    # (runs/s50/settle.py, session 50)
    release_skills: tuple[str, ...] = ("place",)
    # skill -> its own threshold, where calibration found a better one than `threshold` (a pick judged
    # from the hand alone plateaus near 0.65 once done: JudgeConfig.hand_skills, session 35)
    skill_thresholds: dict[str, float] = field(default_factory=dict)
    # skill -> its own steps in a row, where calibration found another count better than `consecutive`
    # (Franka presses: 12 of 67 confirmed before the button latched at 2 steps, 5 at 8; session 47)
    skill_consecutive: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, value in {"threshold": self.threshold, **self.skill_thresholds}.items():
            if not 0 < value < 1:
                raise ValueError(f"VerdictConfig threshold of {name} must be in (0, 1), got {value}")
        for name, value in {"consecutive": self.consecutive, **self.skill_consecutive}.items():
            if int(value) != value or value < 1:
                raise ValueError(f"VerdictConfig steps in a row of {name} must be an int >= 1, got {value}")
        low, high = self.holding
        if not 0 <= low < high <= 1:
            raise ValueError(f"VerdictConfig.holding must be 0 <= low < high <= 1, got {self.holding}")
        if not 0 <= self.held_open < 1:
            raise ValueError(f"VerdictConfig.held_open must be in [0, 1), got {self.held_open}")
        # JSON (Deadlines.rule) gives lists back
        object.__setattr__(self, "grasp_skills", tuple(self.grasp_skills))
        object.__setattr__(self, "release_skills", tuple(self.release_skills))
        object.__setattr__(self, "holding", (float(low), float(high)))

    def thresholds(self, skills: Sequence[str]) -> np.ndarray:
        """(B,) the done threshold of each row's skill."""
        return np.array([self.skill_thresholds.get(skill, self.threshold) for skill in skills])

    def steps(self, skills: Sequence[str]) -> np.ndarray:
        """(B,) the steps in a row each row's skill needs above its threshold."""
        return np.array([self.skill_consecutive.get(skill, self.consecutive) for skill in skills])

    def may_finish(
        self, skills: Sequence[str], gripper: np.ndarray | None, command: np.ndarray | None = None
    ) -> np.ndarray:
        """(B,) bool: may each row's subtask count as done now, given its skill, its gripper reading
        (B,) and the gripper command (B,) that led to it? A grasp's fingers must hold something, a
        release's must have let go; rows of other skills always may; None (no reading, e.g. bare
        frames; no command) skips that check."""
        if gripper is None:
            return np.ones(len(skills), dtype=bool)
        grasp = np.array([skill in self.grasp_skills for skill in skills], dtype=bool)
        release = np.array([skill in self.release_skills for skill in skills], dtype=bool)
        gripper = np.asarray(gripper, dtype=np.float32)
        holding = (gripper >= self.holding[0]) & (gripper <= self.holding[1])
        if command is not None:
            holding &= gripper - np.asarray(command, dtype=np.float32) >= self.held_open
        return (~grasp | holding) & (~release | (gripper > self.holding[1]))


class DoneRule:
    """The done rule for a batch of rows, each with its own streak of steps above the threshold."""

    def __init__(self, config: VerdictConfig, rows: int) -> None:
        self.config = config
        self.streak = np.zeros(rows, dtype=np.int64)

    def reset_rows(self, rows: Sequence[int]) -> None:
        self.streak[list(rows)] = 0

    def update(
        self,
        progress: np.ndarray,
        skills: Sequence[str] | None = None,
        gripper: np.ndarray | None = None,
        command: np.ndarray | None = None,
    ) -> np.ndarray:
        """(B,) done scores -> (B,) bool: done now. With each row's active skill, gripper reading and
        gripper command (B,), each skill has its threshold and steps in a row, and grasps also need the
        fingers to hold something (`VerdictConfig.may_finish`); without skills every row has the
        global rule."""
        if skills is None:
            above, steps = np.asarray(progress) >= self.config.threshold, self.config.consecutive
        else:
            above = np.asarray(progress) >= self.config.thresholds(skills)
            above &= self.config.may_finish(skills, gripper, command)
            steps = self.config.steps(skills)
        self.streak = np.where(above, self.streak + 1, 0)
        return self.streak >= steps


class BatchedJudge:
    """Online judging of B videos at once (imagination's batch, or one robot camera with B = 1).

    Each row keeps its subtask, the features of the subtask's first frame and its GRU state, so a
    step costs one encoder pass per row. Call `reset_rows` whenever a row starts a subtask; the next
    frame `update` receives for that row is the subtask's first frame. `update` returns progress;
    the done rule reads `done`, the done probabilities of the same step:

        progress = online.update(frames, proprio)   # proprio (B, 8) padded: the hand the judge reads
        switch = rule.update(online.done)
    """

    def __init__(self, judge: ProgressJudge, rows: int) -> None:
        self.judge = judge.eval()
        self.rows = rows
        device = next(judge.parameters()).device
        self.device = device
        self.cond = torch.full((rows, 4), -1, dtype=torch.long, device=device)
        self.start = torch.zeros(rows, judge.config.step_dim, device=device)
        self.hidden = torch.zeros(1, rows, judge.config.hidden_dim, device=device)
        self.fresh = torch.ones(rows, dtype=torch.bool, device=device)  # next frame starts a subtask
        self.done = np.zeros(rows, dtype=np.float32)  # done probability of the latest update, per row
        self.progress = np.zeros(rows, dtype=np.float32)  # judged progress of the latest update, per row

    def reset_rows(
        self, rows: Sequence[int], subtasks: Sequence[Subtask], robots: str | Sequence[str]
    ) -> None:
        """Rows `rows` start judging `subtasks` (one each) on `robots` (one name for all, or one each)."""
        robots = [robots] * len(rows) if isinstance(robots, str) else list(robots)
        index = torch.as_tensor(list(rows), dtype=torch.long, device=self.device)
        self.cond[index] = self.judge.condition(robots, subtasks)
        self.hidden[:, index] = 0.0
        self.fresh[index] = True

    @torch.no_grad()
    def update(
        self,
        images: np.ndarray | torch.Tensor,
        proprio: np.ndarray | torch.Tensor | None,
        rows: np.ndarray | None = None,
    ) -> np.ndarray:
        """(B, H, W, 3) uint8 newest frames and (B, 8) padded proprio of the same instant (None only
        for a judge without JudgeConfig.hand) -> (B,) float judged progress of each row's subtask.

        With `rows` (indices), only those rows see their frame and advance (imagination skips the
        rows whose trial has ended); the others keep their state and report their last scores.
        """
        if tuple(images.shape[:1]) != (self.rows,) or images.shape[-1] != 3:
            raise ValueError(f"expected ({self.rows}, H, W, 3) frames, got {tuple(images.shape)}")
        if bool((self.cond[:, COND_SKILL] < 0).any()):
            missing = torch.nonzero(self.cond[:, COND_SKILL] < 0).flatten().tolist()
            raise RuntimeError(f"rows {missing} have no subtask: call reset_rows first")
        every = rows is None  # then the frames go in as they are: no gathered copy of the batch
        rows = np.arange(self.rows) if every else np.asarray(rows, dtype=np.int64)
        index = torch.as_tensor(rows, device=self.device)
        frames = self._rows_of(images, index, every)
        hand = None if proprio is None else self._rows_of(proprio, index, every)
        features = self.judge.observe(frames, hand, self.cond[index, 3])  # (R, S)
        start = torch.where(self.fresh[index, None], features, self.start[index])
        self.start[index], self.fresh[index] = start, False
        logits, hidden = self.judge.step(features[:, None], start, self.cond[index], self.hidden[:, index])
        self.hidden[:, index] = hidden
        scores = torch.sigmoid(logits[:, 0]).float().cpu().numpy()  # (R, 2)
        self.done[rows], self.progress[rows] = scores[:, DONE], scores[:, PROGRESS]
        return self.progress.copy()

    def _rows_of(self, batch: np.ndarray | torch.Tensor, index: torch.Tensor, every: bool) -> torch.Tensor:
        """The rows `index` of a (B, ...) batch on the judge's device (all of it, uncopied, if `every`)."""
        if isinstance(batch, torch.Tensor):
            batch = batch.to(self.device)
            return batch if every else batch[index]
        array = np.asarray(batch)
        return torch.as_tensor(array if every else array[index.cpu().numpy()], device=self.device)


@dataclass
class Deadlines:
    """Per-(arm, skill) deadlines [policy steps], calibrated once and then frozen."""

    steps: dict[str, dict[str, int]]  # robot -> skill -> policy steps a subtask may take
    quantile: float = 0.9  # quantile of judged completion times they were calibrated from
    margin: float = 1.5  # factor applied to that quantile
    samples: dict[str, dict[str, int]] = field(default_factory=dict)  # robot -> skill -> demos used
    default: int | None = None  # for pairs without samples; None: such a pair is an error
    rule: dict = field(default_factory=dict)  # the VerdictConfig they were calibrated under ({}: the judge's)

    def __post_init__(self) -> None:
        if self.rule:  # as VerdictConfig holds it, whether from JSON or written before a field existed
            self.rule = asdict(VerdictConfig(**self.rule))

    def verdict_config(self, fallback: VerdictConfig) -> VerdictConfig:
        """The done rule these deadlines belong to (`fallback` when they do not name one)."""
        return VerdictConfig(**self.rule) if self.rule else fallback

    def of(self, robot: str, skill: str) -> int:
        found = self.steps.get(robot, {}).get(skill, self.default)
        if found is None:
            known = {r: sorted(s) for r, s in self.steps.items()}
            raise KeyError(f"no deadline for {skill!r} on {robot!r}; calibrated: {known}")
        return found

    def per_skill(self, robot: str, skills: Sequence[str]) -> dict[str, int]:
        """skill -> deadline on `robot` (the router's `skill_deadline_steps`)."""
        return {skill: self.of(robot, skill) for skill in skills}

    def save(self, path: Path) -> None:
        Path(path).write_text(json.dumps(asdict(self), indent=2, sort_keys=True) + "\n")

    @classmethod
    def load(cls, path: Path) -> Deadlines:
        return cls(**json.loads(Path(path).read_text()))


class Video(Protocol):
    """What judging needs from an episode (a recorded Episode, or an imagined rollout). Where it also
    has `proprio` (T, native_dim), as recorded episodes do, the judge reads the hand from it and grasps
    are checked against its gripper (and against the gripper commands in `actions`, where it has
    them); a judge with JudgeConfig.hand needs it."""

    images: np.ndarray  # (T, H, W, 3) uint8
    composition: Composition
    fps: float


@dataclass
class VideoClip:
    """A bare video to judge (frames from ROS, or an imagined rollout): satisfies `Video`."""

    images: np.ndarray  # (T, H, W, 3) uint8
    composition: Composition
    fps: float
    proprio: np.ndarray | None = None  # (T, native_dim); None: only a frames-only judge can judge it
    actions: np.ndarray | None = None  # (T, native_dim) applied after each frame; grasps are checked on them


@dataclass
class Verdict:
    """The judge's diagnosis of one video."""

    composition: str
    trace: np.ndarray  # (T,) float32 judged progress of the judged-active subtask at each frame
    active: np.ndarray  # (T,) int16 judged-active subtask at each frame
    progress: list[float]  # per subtask: judged progress when it ended (0 where never reached)
    completed: list[bool]  # per subtask: detected done within its deadline
    switch_times: list[float]  # per subtask: time of the frame it was detected done [s], NEVER if not
    first_failed: int  # first subtask not completed (missed deadline or video ended), -1 if none
    success: bool  # every subtask completed


def judge_episode(
    judge: ProgressJudge,
    episode: Video,
    deadlines: Deadlines | None = None,
    config: VerdictConfig | None = None,
) -> Verdict:
    """Segment and judge a whole video from its frames alone, subtask by subtask.

    The active subtask is known only from the judge's own earlier done detections, as in execution
    and imagination. With `deadlines` None (calibration) a subtask may take the rest of the video.
    """
    config = config or VerdictConfig()
    comp, n_frames = episode.composition, len(episode.images)
    n = len(comp.subtasks)
    online, rule = BatchedJudge(judge, rows=1), DoneRule(config, rows=1)
    proprio, commands = padded_proprio(episode), gripper_commands(episode)
    trace = np.zeros(n_frames, dtype=np.float32)
    active = np.zeros(n_frames, dtype=np.int16)
    progress, completed, switch = [0.0] * n, [False] * n, [NEVER] * n
    index, start, failed = 0, 0, False
    online.reset_rows([0], [comp.subtasks[0]], comp.robot)
    for t in range(n_frames):
        active[t] = min(index, n - 1)
        if index == n:  # everything done: nothing left to judge
            trace[t] = 1.0
            continue
        hand = None if proprio is None else proprio[t : t + 1]
        p = float(online.update(episode.images[t : t + 1], hand)[0])
        trace[t] = progress[index] = p
        if failed:
            continue
        gripper = None if proprio is None else proprio[t : t + 1, -1]
        command = None if commands is None else commands[t : t + 1]
        if rule.update(online.done, [comp.subtasks[index].skill], gripper, command)[0]:
            completed[index], switch[index] = True, t / episode.fps
            index, start = index + 1, t + 1
            rule.reset_rows([0])
            if index < n:
                online.reset_rows([0], [comp.subtasks[index]], comp.robot)
        elif deadlines is not None and t + 1 - start >= deadlines.of(comp.robot, comp.subtasks[index].skill):
            failed = True
    first_failed = next((i for i, done in enumerate(completed) if not done), -1)
    return Verdict(comp.name, trace, active, progress, completed, switch, first_failed, first_failed < 0)


def padded_proprio(video: Video) -> np.ndarray | None:
    """(T, 8) float32 padded proprio of a video (`action_contract.pad`), None where it has none."""
    proprio = getattr(video, "proprio", None)
    return None if proprio is None else pad(video.composition.robot, np.asarray(proprio, dtype=np.float32))


def gripper_commands(video: Video) -> np.ndarray | None:
    """(T,) the gripper command that led to each frame (NaN for the first, which no action led to),
    None where the video has no actions. Action t is applied after frame t is observed."""
    actions = getattr(video, "actions", None)
    if actions is None:
        return None
    gripper = np.asarray(actions, dtype=np.float32)[:, -1]
    return np.concatenate([[np.nan], gripper[:-1]]).astype(np.float32)


def calibrate_deadlines(
    judge: ProgressJudge,
    episodes: Sequence[Video],
    quantile: float = 0.9,
    margin: float = 1.5,
    config: VerdictConfig | None = None,
    truly_completed: Sequence[Sequence[bool]] | None = None,
    min_samples: int = MIN_DEADLINE_SAMPLES,
) -> Deadlines:
    """Deadlines = ceil(margin x quantile) of the judge's completion times on held-out videos.

    Times are the judge's, not the simulator's: a deadline must hold for the rule that enforces it.
    `truly_completed` (per video, per subtask; None: every subtask of every video completed, as in
    successful demos) lets failed expert rollouts add their completed subtasks, which matters
    because experts are slower than the scripted demos. A video adds samples up to its first subtask
    that the judge did not confirm or that did not truly complete (after it the judge's segments no
    longer match the video's). Judge misses add no sample (the evaluation reports them); pairs left
    with fewer than `min_samples` get `default`, margin x the longest truly successful calibration
    video (all of them if none succeeded), so they surface as judge misses rather than as errors, and
    one fast completion does not become everyone's deadline. A failed rollout's
    length is the time it was given, not a time to complete, so it does not stretch the fallback.
    """
    if min_samples < 1:
        raise ValueError(f"min_samples must be >= 1, got {min_samples}")
    if truly_completed is None:
        truly_completed = [[True] * len(e.composition.subtasks) for e in episodes]
    durations: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for episode, truth in zip(episodes, truly_completed, strict=True):
        verdict = judge_episode(judge, episode, None, config)
        start = 0
        for subtask, done, true, seconds in zip(
            episode.composition.subtasks, verdict.completed, truth, verdict.switch_times, strict=True
        ):
            if not (done and true):
                break
            end = round(seconds * episode.fps)
            durations[episode.composition.robot][subtask.skill].append(end + 1 - start)
            start = end + 1
    steps = {
        robot: {
            skill: math.ceil(margin * float(np.quantile(d, quantile)))
            for skill, d in skills.items()
            if len(d) >= min_samples
        }
        for robot, skills in durations.items()
    }
    samples = {robot: {skill: len(d) for skill, d in skills.items()} for robot, skills in durations.items()}
    successful = [len(e.images) for e, done in zip(episodes, truly_completed, strict=True) if all(done)]
    longest = max(successful or [len(e.images) for e in episodes], default=0)
    default = math.ceil(margin * longest) if longest else None
    return Deadlines(steps, quantile, margin, samples, default, asdict(config or VerdictConfig()))

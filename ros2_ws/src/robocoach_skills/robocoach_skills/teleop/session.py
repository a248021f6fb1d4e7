"""One operator's demo session: requests in, takes recorded through the robot interface, verdicts, storage.

A `DemoRequest` from the coach names one subtask of one composition and the initial-state seeds
where imagined rollouts failed. `resolve_request` checks it against the task suite (or says why it
cannot be served: unknown skill, wrong robot, an initial state nothing can reproduce); `DemoSession`
then records takes of that one subtask until `count` are accepted:

1. reset to the seed's initial state (`ResetMode.SCENE`, sim: the scene is reset and the subtasks
   before the requested one are done by the scripted operator, unrecorded, so the take starts where a
   deployed policy would; if they fail, that initial state is unreachable and the request is rejected.
   `ResetMode.OPERATOR`, hardware: the session announces what to set up and waits for the operator's
   `ready`);
2. record frame/action pairs from the teleop source at the policy rate until the operator ends the
   take (or, with `auto_accept`, as soon as the simulator's ground truth says the subtask succeeded);
   frames come from the robot's observation, or from a `Camera` (a real arm's camera driver) that
   raises `CameraError`, which ends the take, once its frames are stale;
3. take the operator's verdict: accepted takes go to the `EpisodeStore` (atomic) and then to an MCAP
   bag next to it; discarded ones are only reported.

Crash safety: a take lives in memory until accepted, and a marker file `.tmp-take-<hex>.json` in the
store root says a take is being recorded. A process killed mid-take leaves only that marker: the
store never lists it (readers skip `.tmp-*`), `incomplete_takes` reports it, and
`EpisodeStore.recover` deletes it. An accepted take is in the store, fsynced, before anyone is
told; a missing bag is re-exported by `export_missing_bags` when the recorder starts again.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import shutil
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from functools import partial
from pathlib import Path

import numpy as np

from robocoach_skills.composition import Composition, Subtask
from robocoach_skills.constants import GRIPPER_JOINT, OBS_IMAGE, OBS_PROPRIO
from robocoach_skills.data.episode import Episode
from robocoach_skills.data.rosbag_export import export_mcap
from robocoach_skills.data.store import EPISODE_PATH, TMP_PREFIX, EpisodeMeta, EpisodeStore
from robocoach_skills.durable import write_durable
from robocoach_skills.robots.base import Robot, RobotError
from robocoach_skills.robots.sim_robot import SimRobot
from robocoach_skills.skills import validate_subtask
from robocoach_skills.tasks import get_composition
from robocoach_skills.teleop.sources import (
    CMD_ACCEPT,
    CMD_CLOSE,
    CMD_DISCARD,
    CMD_END,
    CMD_OPEN,
    CMD_TOGGLE_GRIPPER,
    COMMANDS,
    TeleopSource,
)

RECORDER = "demo_recorder"  # metadata["recorder"] of every episode this module writes
TAKE_MARKER_PREFIX = TMP_PREFIX + "take-"  # under the store's tmp prefix: recover() sweeps it
DISCARDED_BY_OPERATOR = "discarded by the operator"
NOT_SUCCEEDED = "the subtask did not succeed"  # why a take the simulator judged a failure is discarded
CMD_READY = "ready"  # the operator has set the scene up (ResetMode.OPERATOR); a take starts
SESSION_COMMANDS = (*COMMANDS, CMD_READY)  # every command `DemoSession.command` takes


class ResetMode(StrEnum):
    """Who puts the scene in a take's initial state."""

    SCENE = "scene"  # the simulator resets itself and plays the subtasks before the requested one
    OPERATOR = "operator"  # the operator sets the scene up as announced and says `ready`


class CameraError(RobotError):
    """No fresh camera frame: the take in progress is discarded."""


Camera = Callable[[], np.ndarray]  # the newest (H, W, 3) uint8 frame; raises CameraError when stale
Announce = Callable[[str], None]  # announce(text): what the operator must do now ("" when done)


class RequestRejectedError(Exception):
    """A request this station cannot serve; `reason` goes back to the coach."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class TakeCanceledError(Exception):
    """The client canceled the collection while a take was running."""


@dataclass(frozen=True)
class DemoRequestSpec:
    """The plain-Python twin of robocoach_msgs/DemoRequest."""

    request_id: str
    robot: str
    subtask: Subtask
    composition: str  # name in the robot's task suite
    count: int = 1  # accepted demos wanted for this request id, in all (asked again, a station adds the rest)
    seeds: tuple[int, ...] = ()  # initial-state seeds where failures concentrate
    reason: str = ""  # why the coach asks
    priority: float = 0.0
    round: int = 0


@dataclass(frozen=True)
class DemoTarget:
    """A request resolved against the task suite: the subtask is `composition.subtasks[index]`."""

    request: DemoRequestSpec
    composition: Composition
    index: int
    done: int = 0  # accepted demos of this request already stored: a session records only the rest

    @property
    def demo_composition(self) -> Composition:
        """The one-subtask composition the recorded episode carries (as the scripted operator's do)."""
        subtask = self.composition.subtasks[self.index]
        name = f"{self.composition.name}/{self.index}:{subtask.skill}"
        return Composition(name, self.composition.robot, (subtask,), held_out=self.composition.held_out)

    def seed(self, take: int) -> int:
        """Initial-state seed of take `take`: each requested seed (where failures concentrate) once,
        then fresh seeds of the same composition.

        Replaying a few seeds would record near-copies of one demo (25 demos from 3 initial states
        taught the press one scene, docs/results.md, session 25); a person at a real arm never sets a
        scene up twice the same either. Fresh seeds are drawn from the request id, so every station,
        and a restarted one, demonstrates the same initial states for it.
        """
        seeds = self.request.seeds
        return int(seeds[take]) if take < len(seeds) else stable_seed(self.request.request_id, take)


def stable_seed(*parts: object) -> int:
    """A seed in [0, 2**31) that depends only on `parts` (Python's hash() changes from run to run)."""
    digest = hashlib.sha256("/".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:4], "little") >> 1


def unreachable_reason(target: DemoTarget, seed: int) -> str:
    """Why a take of `target` cannot start from `seed`: the subtasks before it did not complete."""
    return (
        f"unreachable initial state: the subtasks before {target.request.subtask} did not "
        f"complete from seed {seed} of {target.composition.name}"
    )


def resolve_request(request: DemoRequestSpec, robot: str) -> DemoTarget:
    """Check a request against this station's robot and task suite; RequestRejectedError says why not."""
    if request.robot != robot:
        raise RequestRejectedError(f"request is for {request.robot!r}; this station records on {robot!r}")
    if request.count < 1:
        raise RequestRejectedError(f"request asks for {request.count} demos")
    try:
        validate_subtask(request.subtask)
    except ValueError as error:
        raise RequestRejectedError(f"cannot demonstrate {request.subtask}: {error}") from None
    try:
        composition = get_composition(robot, request.composition)
    except ValueError as error:
        raise RequestRejectedError(f"unreachable initial state: {error}") from None
    if request.subtask not in composition.subtasks:
        raise RequestRejectedError(
            f"unreachable initial state: {request.subtask} is not a subtask of {composition.name} "
            f"({', '.join(map(str, composition.subtasks))})"
        )
    return DemoTarget(request, composition, composition.subtasks.index(request.subtask))


def describe(target: DemoTarget, accepted: int = 0) -> str:
    """One line for the operator: which subtask, why, from which initial states, how many to go."""
    r = target.request
    seeds = ", ".join(map(str, r.seeds)) if r.seeds else "any"
    return (
        f"[{r.request_id}] round {r.round}, priority {r.priority:.2f}: demonstrate {r.subtask} "
        f"(subtask {target.index + 1}/{len(target.composition.subtasks)} of {target.composition.name}); "
        f"why: {r.reason or 'not given'}; initial-state seeds: {seeds}; {accepted}/{r.count} accepted"
    )


# ---------------------------------------------------------------------------------------------- storage
def stored_demos(store: EpisodeStore, request_id: str) -> list[EpisodeMeta]:
    """The accepted demos `store` holds for `request_id`, oldest first (only accepted takes are stored)."""
    return [m for m in store.iter_meta(kind="demo") if m.metadata.get("request_id") == request_id]


def episode_uri(store: EpisodeStore, episode_id: str) -> str:
    return (store.root / EPISODE_PATH.format(episode_id=episode_id)).resolve().as_uri()


def take_marker(store_root: Path, target: DemoTarget, seed: int) -> Path:
    """Mark a take as in progress (see the module docstring); delete the file when the take ends."""
    path = store_root / f"{TAKE_MARKER_PREFIX}{uuid.uuid4().hex}.json"
    info = {"request_id": target.request.request_id, "subtask": str(target.request.subtask), "seed": seed}
    write_durable(path, json.dumps(info | {"started": time.time(), "pid": os.getpid()}).encode())
    return path


def incomplete_takes(store_root: Path) -> list[dict]:
    """Takes a killed recorder left behind (never stored, never used), with their request ids."""
    takes = []
    for path in sorted(store_root.glob(f"{TAKE_MARKER_PREFIX}*.json")):
        try:
            takes.append(json.loads(path.read_text()) | {"marker": str(path)})
        except (OSError, json.JSONDecodeError):
            takes.append({"marker": str(path)})  # killed while writing the marker itself
    return takes


def bag_path(bag_dir: Path, episode_id: str) -> Path:
    return bag_dir / episode_id


def export_bag(episode: Episode, bag_dir: Path, episode_id: str) -> Path:
    """Write the MCAP bag into a tmp directory, then rename it into place (readers never see half a bag)."""
    bag_dir.mkdir(parents=True, exist_ok=True)
    tmp = bag_dir / f"{TMP_PREFIX}{uuid.uuid4().hex}"
    try:
        export_mcap(episode, tmp)
        os.rename(tmp, bag_path(bag_dir, episode_id))
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return bag_path(bag_dir, episode_id)


def export_missing_bags(store: EpisodeStore, bag_dir: Path) -> list[str]:
    """Re-export the bags of accepted takes whose recorder died between storing and exporting."""
    missing = [
        m.episode_id
        for m in store.iter_meta(kind="demo")
        if m.metadata.get("recorder") == RECORDER and not bag_path(bag_dir, m.episode_id).exists()
    ]
    for episode_id in missing:
        export_bag(store.get(episode_id), bag_dir, episode_id)
    return missing


# ---------------------------------------------------------------------------------------------- takes
@dataclass
class SessionConfig:
    """How takes are recorded and judged."""

    max_take_s: float = 60.0  # a take ends by itself after this long [s]
    verdict_timeout_s: float = 300.0  # no accept/discard within this long after a take -> discarded [s]
    auto_accept: bool = False  # sim only: end a take when the subtask succeeds; accept iff it did
    max_takes_per_demo: int = 3  # takes allowed per requested demo before the request is given up
    preview_frames: int = 4  # frames of each take sent back to operator UIs
    operator: str = "teleop"  # recorded as metadata["operator"]
    reset: ResetMode | None = None  # None: SCENE on the sim backend, OPERATOR on any other

    def __post_init__(self) -> None:
        if self.reset is not None:
            try:
                self.reset = ResetMode(self.reset)
            except ValueError:
                modes = ", ".join(m.value for m in ResetMode)
                raise ValueError(f"SessionConfig.reset must be one of {modes}, got {self.reset!r}") from None
        for name in ("max_take_s", "verdict_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"SessionConfig.{name} must be positive, got {getattr(self, name)}")
        if self.max_takes_per_demo < 1:
            raise ValueError(f"SessionConfig.max_takes_per_demo must be >= 1, got {self.max_takes_per_demo}")
        if self.preview_frames < 0:
            raise ValueError(f"SessionConfig.preview_frames must be >= 0, got {self.preview_frames}")


@dataclass
class TakeResult:
    """One recorded take and what became of it."""

    episode: Episode
    accepted: bool
    seed: int
    duration: float  # [s]
    episode_id: str = ""  # store id; empty when discarded
    storage_uri: str = ""
    bag: Path | None = None
    rejection_reason: str = ""  # why it was not accepted
    preview: list[np.ndarray] = field(default_factory=list)


# The callbacks of a demo session's `collect` (`DemoSession`, `scripted.ScriptedSession`):
OnStatus = Callable[[str, int], None]  # on_status(text, accepted_so_far)
CancelCheck = Callable[[], bool]  # canceled(): True once the goal is canceled
OnTake = Callable[[TakeResult], None]  # on_take(result), after every take


def finish_take(
    episode: Episode, seed: int, store: EpisodeStore, rejection_reason: str, preview_frames: int
) -> TakeResult:
    """The outcome of a take; an accepted one (`rejection_reason` empty) is stored before anyone is told."""
    step = max(1, len(episode) // preview_frames) if preview_frames else 0
    result = TakeResult(
        episode,
        accepted=not rejection_reason,
        seed=seed,
        duration=(len(episode) - 1) / episode.fps,
        rejection_reason=rejection_reason,
        preview=list(episode.images[::step][:preview_frames]) if step else [],
    )
    if result.accepted:
        result.episode_id = store.add(episode)  # atomic and fsynced: from here on it is never lost
        result.storage_uri = episode_uri(store, result.episode_id)
    return result


def _prefixed(on_status: OnStatus, prefix: str, accepted: int, text: str) -> None:
    on_status(prefix + text, accepted)


def setup_instructions(target: DemoTarget, seed: int) -> str:
    """What an operator sets up by hand before a take of `target` from `seed` (ResetMode.OPERATOR)."""
    done = target.composition.subtasks[: target.index]
    before = f"with {', '.join(map(str, done))} already done" if done else "at its start"
    return (
        f"set up {target.composition.name} (initial-state seed {seed}) {before}, arm free, then send "
        f"'{CMD_READY}' to record {target.request.subtask} for request {target.request.request_id}"
    )


class _Frames:
    """Frame t is observed, then action t applied; progress is the ground truth of frame t (0 without one)."""

    def __init__(self) -> None:
        self.images: list[np.ndarray] = []
        self.proprio: list[np.ndarray] = []
        self.actions: list[np.ndarray] = []
        self.progress: list[float] = []

    def add(self, obs: dict, action: np.ndarray, progress: float) -> None:
        self.images.append(obs[OBS_IMAGE])
        self.proprio.append(obs[OBS_PROPRIO])
        self.actions.append(np.asarray(action, dtype=np.float32))
        self.progress.append(progress)

    def episode(
        self, composition: Composition, seed: int, fps: float, success: bool, metadata: dict
    ) -> Episode:
        n = len(self.actions)
        return Episode(
            composition=composition,
            seed=seed,
            fps=fps,
            images=np.stack(self.images),
            proprio=np.stack(self.proprio).astype(np.float32),
            actions=np.stack(self.actions).astype(np.float32),
            subtask_index=np.zeros(n, dtype=np.int16),
            progress=np.asarray(self.progress, dtype=np.float32),
            success=success,
            kind="demo",
            metadata=metadata,
        )


class DemoSession:
    """Records takes for resolved requests on one robot, from one teleop source.

    `command` may be called from any thread (topic callbacks, a stdin reader); `collect` runs in one
    thread at a time and paces itself at the robot's policy rate.
    """

    def __init__(
        self,
        robot: Robot,
        source: TeleopSource,
        store: EpisodeStore,
        bag_dir: Path,
        config: SessionConfig,
        camera: Camera | None = None,
        announce: Announce | None = None,
    ):
        """`camera` replaces the robot's own frames; `announce` shows the operator what to set up."""
        if camera is None and OBS_IMAGE not in robot.observation_features:
            raise ValueError(f"{robot!r} has no camera; a demo needs camera frames (pass a camera)")
        sim = isinstance(robot, SimRobot)
        if config.auto_accept and not sim:
            raise ValueError("auto_accept needs the simulator's ground truth (backend 'sim')")
        self.reset_mode = config.reset or (ResetMode.SCENE if sim else ResetMode.OPERATOR)
        if self.reset_mode is ResetMode.SCENE and not sim:
            raise ValueError(f"{robot!r} cannot reset a scene; only the sim backend can (reset 'operator')")
        self.robot, self.source, self.store, self.bag_dir, self.config = robot, source, store, bag_dir, config
        self.camera, self.announce = camera, announce or (lambda _text: None)
        self.gripper = 1.0  # gripper command, 1 = open
        self._commands: queue.Queue[str] = queue.Queue()

    # ------------------------------------------------------------------ operator input
    def command(self, name: str) -> None:
        """An operator command (sources.COMMANDS); gripper commands act at once, the others on the take."""
        if name not in SESSION_COMMANDS:
            raise ValueError(f"unknown operator command {name!r}; known: {', '.join(SESSION_COMMANDS)}")
        if name in (CMD_OPEN, CMD_CLOSE, CMD_TOGGLE_GRIPPER):
            self.gripper = (
                1.0 if name == CMD_OPEN else 0.0 if name == CMD_CLOSE else 1.0 - round(self.gripper)
            )
        else:
            self._commands.put(name)

    def _drain(self) -> str | None:
        """The last take command received since the previous call (None: nothing new)."""
        last = None
        while True:
            try:
                last = self._commands.get_nowait()
            except queue.Empty:
                return last

    # ------------------------------------------------------------------ initial state and sensing
    def _reset(self, target: DemoTarget, seed: int, status: Callable[[str], None], canceled) -> None:
        if self.reset_mode is ResetMode.OPERATOR:
            self._await_ready(setup_instructions(target, seed), status, canceled)
        elif not self.robot.reset_for_subtask(target.composition, target.index, seed):
            raise RequestRejectedError(unreachable_reason(target, seed))

    def _await_ready(self, instructions: str, status: Callable[[str], None], canceled) -> None:
        """Announce `instructions` and wait for `ready`; commands sent before the announcement are stale."""
        self._drain()
        self.announce(instructions)
        try:
            status(instructions)
            while self._drain() != CMD_READY:
                if canceled():
                    raise TakeCanceledError
                time.sleep(0.05)
        finally:
            self.announce("")

    def _observe(self) -> dict[str, np.ndarray]:
        """The robot's observation, its image replaced by the camera's newest frame when there is a camera."""
        obs = self.robot.observe()
        if self.camera is None:
            return obs
        try:
            return {**obs, OBS_IMAGE: self.camera()}
        except CameraError:
            self.robot.hold()
            raise

    def _ground_truth(self) -> tuple[float, bool]:
        return self.robot.subtask_status() if isinstance(self.robot, SimRobot) else (0.0, False)

    # ------------------------------------------------------------------ takes
    def collect(
        self, target: DemoTarget, on_status: OnStatus, canceled: CancelCheck, on_take: OnTake | None = None
    ) -> list[TakeResult]:
        """Record takes until `count` are accepted (`target.done` of them already) or the take allowance
        for the rest is spent.

        `on_status(text, accepted_so_far)` is called about once a second, `on_take` after every take;
        raises TakeCanceledError when `canceled()` turns true, RequestRejectedError when no take can start.
        """
        results: list[TakeResult] = []
        accepted, count = target.done, target.request.count
        # take numbers, and with them seeds, go on after the stored demos' (asked again, no seed repeats)
        for take in range(target.done, target.done + (count - target.done) * self.config.max_takes_per_demo):
            if accepted >= count:
                break
            seed = target.seed(take)
            status = partial(_prefixed, on_status, f"take {take + 1}: ", accepted)
            status(f"resetting to seed {seed}")
            self._reset(target, seed, status, canceled)
            result = self._take(target, seed, status, canceled)
            accepted += result.accepted
            results.append(result)
            if on_take is not None:
                on_take(result)
        return results

    def _take(self, target: DemoTarget, seed: int, status: Callable[[str], None], canceled) -> TakeResult:
        marker = take_marker(self.store.root, target, seed)
        try:
            self._drain()  # commands sent before the take started are stale
            frames, success, verdict = self._record(target, status, canceled)
            reason = DISCARDED_BY_OPERATOR
            if verdict is None and self.config.auto_accept:
                verdict, reason = (CMD_ACCEPT if success else CMD_DISCARD), NOT_SUCCEEDED
            elif verdict is None:
                verdict = self._verdict(status, canceled)
            return self._finish(target, seed, frames, success, "" if verdict == CMD_ACCEPT else reason)
        finally:
            marker.unlink(missing_ok=True)

    def _record(self, target: DemoTarget, status, canceled) -> tuple[_Frames, bool, str | None]:
        """Run the take at the policy rate; returns the frames, ground-truth success and an early verdict."""
        robot, cfg = self.robot, self.config
        frames = _Frames()
        n = robot.arm.n_joints
        obs = self._observe()
        self.source.start(obs[OBS_PROPRIO][:n].astype(np.float64))
        self.gripper = float(round(obs[OBS_PROPRIO][n]))
        start = next_tick = time.monotonic()
        last_status = -1.0
        success, verdict = False, None
        while time.monotonic() - start < cfg.max_take_s:
            if canceled():
                robot.hold()
                raise TakeCanceledError
            command = self._drain()
            if command in (CMD_ACCEPT, CMD_DISCARD):
                verdict = command
                break
            if command == CMD_END:
                break
            progress, success = self._ground_truth()
            if success and cfg.auto_accept:
                break
            action = self.source.action(obs[OBS_PROPRIO][:n].astype(np.float64), self.gripper)
            applied = robot.send_action(action)
            frames.add(obs, applied, progress)
            if time.monotonic() - last_status >= 1.0:
                last_status = time.monotonic()
                frame = len(frames.actions)
                status(f"recording {target.request.subtask}, frame {frame}, progress {progress:.2f}")
            next_tick += robot.dt
            time.sleep(max(0.0, next_tick - time.monotonic()))
            obs = self._observe()
        progress, success = self._ground_truth()
        frames.add(obs, np.append(obs[OBS_PROPRIO][:n], self.gripper), progress)  # end state, hold action
        robot.hold()
        return frames, success, verdict

    def _verdict(self, status, canceled) -> str:
        status("take ended: accept (y) or discard (n)?")
        deadline = time.monotonic() + self.config.verdict_timeout_s
        while time.monotonic() < deadline:
            if canceled():
                raise TakeCanceledError
            command = self._drain()
            if command in (CMD_ACCEPT, CMD_DISCARD):
                return command
            time.sleep(0.05)
        return CMD_DISCARD

    def _finish(
        self, target: DemoTarget, seed: int, frames: _Frames, success: bool, rejection_reason: str
    ) -> TakeResult:
        """Label the take and, when accepted (`rejection_reason` empty), store it and export its bag."""
        robot = self.robot
        r = target.request
        metadata = {
            "recorder": RECORDER,
            "operator": self.config.operator,
            "request_id": r.request_id,
            "round": r.round,
            "source_composition": target.composition.name,
            "source_subtask_index": target.index,
            "ground_truth": isinstance(robot, SimRobot),
            "joint_names": [*robot.arm.joint_names, GRIPPER_JOINT],
        }
        # Without ground truth (hardware) the operator's acceptance is the success label.
        label = success if isinstance(robot, SimRobot) else not rejection_reason
        episode = frames.episode(target.demo_composition, seed, 1.0 / robot.dt, label, metadata)
        result = finish_take(episode, seed, self.store, rejection_reason, self.config.preview_frames)
        if result.accepted:
            result.bag = export_bag(episode, self.bag_dir, result.episode_id)
        return result

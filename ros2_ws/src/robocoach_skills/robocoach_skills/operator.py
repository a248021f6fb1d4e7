"""A scripted stand-in for a human teleoperator, answering demo requests in simulation.

It follows each skill's waypoint script the way a person drives a teleoperation rig: the hand moves
at a speed that varies from motion to motion, trembles a little (Gaussian noise on every Cartesian
set-point), hesitates now and then, and when an attempt fails (a grasp that slipped, a push that
missed) it backs off and tries again. Cartesian set-points become joint targets through DLS IK,
so the recorded actions are ordinary joint-position commands, like any policy's.

Whether a demo succeeded is read from the simulator's ground truth, never assumed.

Failure injection (`OperatorConfig.failure_probability`) makes the operator spoil one subtask of an
episode the way a weak policy does, so progress judges and world models see failures: it quits
early and idles ("stop_early"), its hand drifts away from the plan ("drift"), it aims a few
centimetres off ("miss"), or it acts on the wrong object ("wrong_object"). A spoiled subtask gets
one attempt, no retries; `metadata["injected_failure"]` describes the plan (None when nothing was
injected), and whether the episode failed is still the simulator's ground truth.

    op = ScriptedOperator(OperatorConfig(seed=0))
    episode = op.demo_subtask(scene, get_composition("franka", "pick_place_bin"), index=1, seed=4)

Recorded frames: frame t is observed, then action t is applied; the last frame shows the final
state and carries a hold action (the applied targets) that is not executed. With
`SceneConfig(render=False)` the episode's images have shape (T, 0, 0, 3).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from robocoach_skills.composition import Composition, Subtask
from robocoach_skills.constants import OBS_IMAGE, OBS_PROPRIO
from robocoach_skills.data.episode import Episode
from robocoach_skills.sim.geometry import escape_height, transit_height
from robocoach_skills.sim.ik import IK_PITCH_WEIGHT, IKConfig, IKSolver, top_down_rotation
from robocoach_skills.sim.layout import BUTTONS, CUBES
from robocoach_skills.sim.mjcf import TCP_SITE
from robocoach_skills.sim.scene import SceneConfig, SimScene
from robocoach_skills.skills import (
    ScriptContext,
    Waypoint,
    get_skill,
    nearest_yaw,
    wrap_angle,
)
from robocoach_skills.tasks import skill_instances

FAILURE_MODES: tuple[str, ...] = ("stop_early", "drift", "miss", "wrong_object")
FAILURE_STREAM = 7  # extra seed word: failure draws never shift the operator's ordinary randomness


@dataclass(frozen=True)
class OperatorConfig:
    """Habits of the scripted operator."""

    noise_std: float = 0.0015  # hand tremor: std of the noise on each Cartesian set-point [m]
    speed_range: tuple[float, float] = (0.10, 0.22)  # hand speed, drawn per motion [m/s]
    yaw_rate: float = 1.5  # how fast the wrist is turned [rad/s]
    pause_probability: float = 0.1  # chance of a short hesitation after a motion
    max_pause_steps: int = 3  # longest hesitation [policy steps]
    settle_steps: int = 4  # steps to wait for the arm once the set-point has arrived
    slack_steps: int = 15  # steps allowed beyond a motion's nominal duration before moving on
    back_off: float = 0.06  # before another attempt, raise the hand this far [m]
    max_attempts: int = 3  # attempts of one subtask before giving up
    max_steps_per_subtask: int = 400  # step budget of one subtask, all attempts together
    ik_iters: int = 30  # IK iterations per policy step (warm-started from the last solution)
    seed: int = 0  # the operator's own randomness, combined with each demo's seed
    failure_probability: float = 0.0  # chance that an episode gets one spoiled subtask
    failure_modes: tuple[str, ...] = FAILURE_MODES  # injected failures, drawn uniformly
    stop_early_steps: tuple[int, int] = (5, 40)  # stop_early: steps done before quitting [policy steps]
    idle_steps: tuple[int, int] = (10, 40)  # after a spoiled subtask the hand idles this long [policy steps]
    drift_std: float = 0.004  # drift: per-step std of a horizontal random walk added to set-points [m]
    miss_offset: tuple[float, float] = (0.03, 0.06)  # miss: horizontal offset of every set-point [m]
    # A subtask demo's earlier subtasks (not recorded) stop the moment the simulator sees each complete,
    # where a deployed router switches, instead of finishing their scripts (a press's retreat to 15 cm):
    # the recorded demo then starts where a deployed expert does (a pick after a press learnt from 50
    # such demos: 0 -> 7 of 11, docs/bootstrap.md session 39). Each subtask's script first frees the hand
    # from where the last one left it (`_Hand.free`). Off: prerequisites finish their scripts.
    prerequisites_stop_at_completion: bool = True

    def __post_init__(self) -> None:
        if self.noise_std < 0:
            raise ValueError(f"OperatorConfig.noise_std must be >= 0, got {self.noise_std}")
        lo, hi = self.speed_range
        if not 0 < lo <= hi:
            raise ValueError(
                f"OperatorConfig.speed_range must satisfy 0 < min <= max, got {self.speed_range}"
            )
        if not 0 <= self.pause_probability <= 1:
            raise ValueError(
                f"OperatorConfig.pause_probability must be in [0, 1], got {self.pause_probability}"
            )
        for name in ("yaw_rate", "max_attempts", "max_steps_per_subtask", "ik_iters"):
            if getattr(self, name) <= 0:
                raise ValueError(f"OperatorConfig.{name} must be positive, got {getattr(self, name)}")
        if not 0 <= self.failure_probability <= 1:
            raise ValueError(
                f"OperatorConfig.failure_probability must be in [0, 1], got {self.failure_probability}"
            )
        unknown = [m for m in self.failure_modes if m not in FAILURE_MODES]
        if unknown or not self.failure_modes:
            raise ValueError(
                f"OperatorConfig.failure_modes {self.failure_modes} must be a non-empty subset of "
                f"{FAILURE_MODES}"
            )
        for name in ("stop_early_steps", "idle_steps", "miss_offset"):
            lo, hi = getattr(self, name)
            if not 0 <= lo <= hi:
                raise ValueError(f"OperatorConfig.{name} must satisfy 0 <= min <= max, got {(lo, hi)}")
        if self.drift_std < 0:
            raise ValueError(f"OperatorConfig.drift_std must be >= 0, got {self.drift_std}")


@dataclass(frozen=True)
class InjectedFailure:
    """How one subtask of an episode is spoiled, drawn before the episode starts."""

    mode: str  # one of FAILURE_MODES
    subtask_index: int  # index in the episode's source composition
    stop_after: int  # stop_early: policy steps performed before quitting
    offset: tuple[float, float]  # miss: horizontal set-point offset [m]
    idle: int  # policy steps the hand idles after the spoiled attempt

    @classmethod
    def draw(cls, config: OperatorConfig, rng: np.random.Generator, indices: range) -> InjectedFailure | None:
        """None with probability 1 - failure_probability, else a failure of a subtask in `indices`."""
        if rng.random() >= config.failure_probability:
            return None
        mode = str(rng.choice(config.failure_modes))
        angle, radius = rng.uniform(0, 2 * math.pi), rng.uniform(*config.miss_offset)
        return cls(
            mode=mode,
            subtask_index=int(rng.choice(indices)),
            stop_after=int(rng.integers(config.stop_early_steps[0], config.stop_early_steps[1] + 1)),
            offset=(radius * math.cos(angle), radius * math.sin(angle)),
            idle=int(rng.integers(config.idle_steps[0], config.idle_steps[1] + 1)),
        )


class _Recorder:
    """Collects (observation, action, label) per step while a demo is being recorded."""

    def __init__(self, scene: SimScene):
        self.scene = scene
        self.images: list[np.ndarray] = []
        self.proprio: list[np.ndarray] = []
        self.actions: list[np.ndarray] = []
        self.labels: list[int] = []
        self.progress: list[float] = []
        self.label = 0  # subtask index written for the next frames
        self.progress_of: Callable[[], float] = lambda: 0.0

    def observe(self) -> None:
        """Record frame t (call before its action is applied)."""
        obs = self.scene.observe()
        if OBS_IMAGE in obs:
            self.images.append(obs[OBS_IMAGE])
        self.proprio.append(obs[OBS_PROPRIO])
        self.labels.append(self.label)
        self.progress.append(self.progress_of())

    def act(self, applied: np.ndarray) -> None:
        """Record action t: what the robot actually executed (after the scene's clipping)."""
        self.actions.append(np.asarray(applied, dtype=np.float32))

    def final(self) -> None:
        """Record the end state, with a hold of the current targets as its (unexecuted) action."""
        self.observe()
        self.act(self.scene.joint_targets())

    def episode(self, composition: Composition, seed: int, success: bool, metadata: dict) -> Episode:
        n = len(self.actions)
        images = np.stack(self.images) if self.images else np.zeros((n, 0, 0, 3), dtype=np.uint8)
        return Episode(
            composition=composition,
            seed=seed,
            fps=self.scene.config.policy_hz,
            images=images,
            proprio=np.stack(self.proprio).astype(np.float32),
            actions=np.stack(self.actions).astype(np.float32),
            subtask_index=np.asarray(self.labels, dtype=np.int16),
            progress=np.asarray(self.progress, dtype=np.float32),
            success=success,
            kind="demo",
            metadata=metadata,
        )


class _Completed(Exception):  # noqa: N818 (a signal, not an error)
    """Raised by `_Hand` once its `stop_when` holds: the subtask being performed is complete."""


class _Hand:
    """Turns Cartesian set-points into joint commands and steps the scene (one per policy step)."""

    def __init__(self, scene: SimScene, config: OperatorConfig, rng: np.random.Generator):
        self.scene, self.config, self.rng = scene, config, rng
        arm = scene.arm
        ik_config = IKConfig(max_iters=config.ik_iters, pitch_weight=IK_PITCH_WEIGHT[arm.name])
        self.ik = IKSolver(scene.model, arm.joint_names, TCP_SITE, ik_config)
        home_pos, home_rot = self.ik.forward(np.asarray(arm.home))
        self._home_yaw = math.atan2(home_rot[1, 1], home_rot[0, 1])
        self._home_azimuth = math.atan2(home_pos[1], home_pos[0])
        self.recorder: _Recorder | None = None
        self.steps = 0
        self.bias = np.zeros(3)  # offset added to every set-point (injected miss / drift) [m]
        self.drift_std = 0.0  # per-step std of the random walk of `bias` in x and y [m]
        self.grip = 1.0  # last gripper command
        self.stop_when: Callable[[], bool] | None = None  # checked after every step (raises _Completed)
        self.sync()

    def sync(self) -> None:
        """Take over from wherever the arm is (after a reset or unrecorded steps)."""
        state = self.scene.privileged_state()
        self.setpoint = state["ee_pos"].copy()
        self.yaw = state["ee_yaw"]
        self.q_cmd = self.scene.joint_targets()[: self.scene.n_joints]

    def natural_yaw(self, pos: np.ndarray) -> float:
        """Closing-axis yaw the wrist has above `pos` when only the base joint has turned."""
        return wrap_angle(self._home_yaw + math.atan2(pos[1], pos[0]) - self._home_azimuth)

    def _act(self, grip: float) -> None:
        if self.drift_std > 0:
            self.bias[:2] += self.rng.normal(0.0, self.drift_std, 2)
        noisy = self.setpoint + self.bias + self.rng.normal(0.0, self.config.noise_std, 3)
        self.grip = grip
        self.q_cmd = self.ik.solve(noisy, top_down_rotation(self.yaw), self.q_cmd).q
        if self.recorder is not None:
            self.recorder.observe()
        applied = self.scene.apply_action(np.append(self.q_cmd, grip))
        if self.recorder is not None:
            self.recorder.act(applied)
        self.steps += 1
        if self.stop_when is not None and self.stop_when():
            raise _Completed

    def go(self, wp: Waypoint, budget: int) -> None:
        """Move to a waypoint, first lifting the hand over anything the straight move would hit."""
        if not wp.lift_over:
            self.move(wp, budget)
            return
        state = self.scene.privileged_state()
        height = transit_height(state, self.setpoint, wp.pos, self._reach_below(state))
        if height is not None:
            lift = max(height, self.setpoint[2])
            for via in (np.array([*self.setpoint[:2], lift]), np.array([*wp.pos[:2], lift])):
                self.move(Waypoint(via, wp.yaw, wp.grip), budget)
        self.move(wp, budget)

    def free(self, budget: int) -> None:
        """Rise straight out of whatever the hand is in, on or hooked behind (the bin, a pressed button,
        the drawer handle), as a subtask that starts where the last one completed must first do."""
        state = self.scene.privileged_state()
        height = escape_height(state, self.setpoint, self._reach_below(state))
        if height is not None:
            self.move(Waypoint(np.array([*self.setpoint[:2], height]), self.yaw, self.grip), budget)

    def _reach_below(self, state: dict) -> float:
        """How far the hand, or a cube it carries, reaches below the TCP [m]."""
        below = self.scene.arm.gripper.tip_margin
        for cube in state["objects"].values():
            if cube["grasped"]:
                below = max(below, state["ee_pos"][2] - cube["pos"][2] + state["cube_half"])
        return below

    def move(self, wp: Waypoint, budget: int) -> None:
        """Follow one waypoint at a freshly drawn speed; stops early when the step budget is spent."""
        cfg, dt = self.config, self.scene.dt
        speed = self.rng.uniform(*cfg.speed_range) * wp.speed
        # The parallel gripper is symmetric under a half turn: aim for the equivalent yaw closest to
        # the untwisted wrist, so repeated re-planning never winds the wrist up against its limits.
        natural = self.natural_yaw(wp.pos)
        yaw_goal = nearest_yaw(wp.yaw, math.pi, natural)
        self.yaw = natural + wrap_angle(self.yaw - natural)
        distance = float(np.linalg.norm(wp.pos - self.setpoint))
        nominal = max(distance / (speed * dt), abs(yaw_goal - self.yaw) / (cfg.yaw_rate * dt))
        settled = 0
        for _ in range(math.ceil(nominal) + cfg.slack_steps):
            if self.steps >= budget:
                return
            delta = wp.pos - self.setpoint
            dist = float(np.linalg.norm(delta))
            self.setpoint = (
                wp.pos.copy() if dist <= speed * dt else self.setpoint + delta * (speed * dt / dist)
            )
            self.yaw += float(np.clip(yaw_goal - self.yaw, -cfg.yaw_rate * dt, cfg.yaw_rate * dt))
            self._act(wp.grip)
            arrived = dist <= speed * dt and abs(yaw_goal - self.yaw) < 1e-9
            if arrived:
                settled += 1
                tcp = self.scene.ee_pose()[0]
                if np.linalg.norm(tcp - wp.pos) < wp.tol or settled >= cfg.settle_steps:
                    break
        pause = (
            self.rng.integers(1, cfg.max_pause_steps + 1) if self.rng.random() < cfg.pause_probability else 0
        )
        for _ in range(wp.dwell + pause):
            if self.steps >= budget:
                return
            self._act(wp.grip)

    def idle(self, steps: int) -> None:
        """Hold the current set-point and grip (a stalled policy), recording as usual."""
        for _ in range(steps):
            self._act(self.grip)


class ScriptedOperator:
    """Produces subtask and whole-task demonstrations from skill scripts; see the module docstring."""

    def __init__(self, config: OperatorConfig | None = None):
        self.config = config or OperatorConfig()

    def _context(self, scene: SimScene, hand: _Hand, subtask: Subtask) -> ScriptContext:
        g = scene.arm.gripper
        return ScriptContext(
            subtask=subtask,
            state=scene.privileged_state,
            rng=hand.rng,
            natural_yaw=hand.natural_yaw,
            stroke=g.stroke,
            finger_thickness=g.finger_thickness,
            finger_width=g.finger_width,
            tip_margin=g.tip_margin,
            palm_length=g.palm_size[1],
            palm_width=g.palm_size[0],
            palm_above_tcp=g.finger_length - g.tip_margin,
        )

    def _perform_subtask(
        self, scene: SimScene, hand: _Hand, composition: Composition, index: int
    ) -> tuple[int, bool]:
        """Run subtask `index` (already started in the scene) with retries; returns (attempts, success)."""
        cfg = self.config
        skill = get_skill(composition.subtasks[index].skill)
        budget = hand.steps + cfg.max_steps_per_subtask
        hand.free(budget)
        attempts = 0
        while attempts < cfg.max_attempts and hand.steps < budget:
            attempts += 1
            if attempts > 1:  # back off and open the hand before trying again, as a person would
                up = scene.ee_pose()[0] + np.array([0.0, 0.0, cfg.back_off])
                hand.move(Waypoint(up, hand.yaw, 1.0), budget)
            for wp in skill.script(self._context(scene, hand, composition.subtasks[index])):
                hand.go(wp, budget)
                if hand.steps >= budget:
                    break
            if scene.subtask_success(index):
                return attempts, True
        return attempts, False

    def _perform_prerequisite(
        self, scene: SimScene, hand: _Hand, composition: Composition, index: int
    ) -> bool:
        """Subtask `index` before a recorded one: performed, and with `prerequisites_stop_at_completion`
        left the step it completes, as a deployed router leaves it; returns success."""
        if not self.config.prerequisites_stop_at_completion:
            return self._perform_subtask(scene, hand, composition, index)[1]
        hand.stop_when = lambda: scene.subtask_success(index)
        try:
            return self._perform_subtask(scene, hand, composition, index)[1]
        except _Completed:
            return True
        finally:
            hand.stop_when = None

    def _spoil_subtask(
        self, scene: SimScene, hand: _Hand, subtask: Subtask, failure: InjectedFailure
    ) -> tuple[int, bool, str]:
        """One attempt at `subtask`, spoiled as `failure` says; returns (1, success, mode used).

        "wrong_object" acts on another present object of the same kind; where there is none (the
        drawer) it becomes "miss"."""
        mode, budget = failure.mode, hand.steps + self.config.max_steps_per_subtask
        if mode == "wrong_object":
            other = _other_object(scene, subtask)
            mode = "miss" if other is None else mode
            subtask = subtask if other is None else dataclasses.replace(subtask, object=other)
        hand.free(budget)
        if mode == "stop_early":
            budget = hand.steps + failure.stop_after
        elif mode == "miss":
            hand.bias[:2] = failure.offset
        elif mode == "drift":
            hand.drift_std = self.config.drift_std
        for wp in get_skill(subtask.skill).script(self._context(scene, hand, subtask)):
            hand.go(wp, budget)
            if hand.steps >= budget:
                break
        hand.idle(failure.idle)
        hand.bias[:], hand.drift_std = 0.0, 0.0
        return 1, scene.subtask_success(scene.active_subtask), mode

    def _start(self, scene: SimScene, composition: Composition, seed: int, index: int) -> _Hand:
        scene.reset(composition, seed)
        rng = np.random.default_rng([self.config.seed, seed, index + 1])  # index -1: whole task
        return _Hand(scene, self.config, rng)

    def _draw_failure(self, seed: int, index: int, indices: range) -> InjectedFailure | None:
        rng = np.random.default_rng([self.config.seed, seed, index + 1, FAILURE_STREAM])
        return InjectedFailure.draw(self.config, rng, indices)

    def _metadata(self, scene: SimScene, composition: Composition, **extra) -> dict:
        region = scene.initial_state.region if scene.initial_state else "unknown"
        return {
            "operator": "scripted",
            "operator_seed": self.config.seed,
            "source_composition": composition.name,
            "region": region,
            **extra,
        }

    def successful_demo(
        self, scene: SimScene, composition: Composition, index: int, seeds: Iterator[int], max_takes: int
    ) -> tuple[Episode | None, int]:
        """The first of up to `max_takes` takes of `demo_subtask` that succeeds, each from the next of
        `seeds` -> (that demo, None if every take failed; the failed takes, thrown away)."""
        for failed in range(max_takes):
            episode = self.demo_subtask(scene, composition, index, next(seeds))
            if episode.success:
                return episode, failed
        return None, max_takes

    def demo_subtask(self, scene: SimScene, composition: Composition, index: int, seed: int) -> Episode:
        """A demo of subtask `index` alone, from the state the earlier subtasks leave behind.

        Earlier subtasks are first done by the script without recording, so the recorded start is
        what a deployed policy would meet. The episode's composition is the one subtask.
        """
        subtask = composition.subtasks[index]
        hand = self._start(scene, composition, seed, index)
        failure = self._draw_failure(seed, index, range(index, index + 1))
        prerequisites_ok = True
        for i in range(index):
            scene.start_subtask(i)
            prerequisites_ok &= self._perform_prerequisite(scene, hand, composition, i)
        scene.start_subtask(index)
        hand.sync()
        hand.recorder = recorder = _Recorder(scene)
        recorder.progress_of = lambda: scene.subtask_progress(index)
        first_step = hand.steps
        if failure is None:
            attempts, _ = self._perform_subtask(scene, hand, composition, index)
        else:
            attempts, _, mode = self._spoil_subtask(scene, hand, subtask, failure)
            failure = dataclasses.replace(failure, mode=mode)
        recorder.final()
        success = scene.subtask_success(index)
        one = Composition(
            f"{composition.name}/{index}:{subtask.skill}",
            composition.robot,
            (subtask,),
            held_out=composition.held_out,
        )
        meta = self._metadata(
            scene,
            composition,
            source_subtask_index=index,
            attempts=[attempts],
            prerequisites_ok=prerequisites_ok,
            steps=hand.steps - first_step,
            injected_failure=_failure_meta(failure),
        )
        return recorder.episode(one, seed, success, meta)

    def demo_composition(self, scene: SimScene, composition: Composition, seed: int) -> Episode:
        """A demo of the whole task (for end-to-end baselines); stops at the first failed subtask."""
        hand = self._start(scene, composition, seed, -1)
        failure = self._draw_failure(seed, -1, range(len(composition.subtasks)))
        hand.recorder = recorder = _Recorder(scene)
        attempts, completed = [], 0
        for i in range(len(composition.subtasks)):
            scene.start_subtask(i)
            recorder.label = i
            recorder.progress_of = lambda i=i: scene.subtask_progress(i)
            if failure is not None and failure.subtask_index == i:
                tries, ok, mode = self._spoil_subtask(scene, hand, composition.subtasks[i], failure)
                failure = dataclasses.replace(failure, mode=mode)
            else:
                tries, ok = self._perform_subtask(scene, hand, composition, i)
            attempts.append(tries)
            if not ok:
                break
            completed += 1
        recorder.final()
        success = completed == len(composition.subtasks)
        meta = self._metadata(
            scene,
            composition,
            attempts=attempts,
            completed_subtasks=completed,
            steps=hand.steps,
            injected_failure=_failure_meta(failure),
        )
        return recorder.episode(composition, seed, success, meta)


def _other_object(scene: SimScene, subtask: Subtask) -> str | None:
    """Another present object of the same kind as the subtask's (a cube or a button), if any."""
    state = scene.privileged_state()
    if subtask.object in CUBES:
        others = [c for c in CUBES if c != subtask.object and state["objects"][c]["present"]]
    else:
        others = [b for b in BUTTONS if b != subtask.object]
    return others[0] if others else None


def _failure_meta(failure: InjectedFailure | None) -> dict | None:
    """The failure plan as episode metadata (JSON): what was injected where."""
    if failure is None:
        return None
    return {**dataclasses.asdict(failure), "offset": list(failure.offset)}


def measure_skill_success(
    robot: str, n_seeds: int, config: OperatorConfig | None = None, render: bool = False
) -> dict[str, tuple[int, int]]:
    """Scripted-demo success per skill: skill -> (successes, attempts) over seeds 0..n_seeds-1.

    Seed s demonstrates the skill in its (s mod k)-th use across the training compositions, so
    every context the skill appears in is covered; success is the simulator's ground truth.
    """
    scene = SimScene(SceneConfig(robot=robot, render=render))
    operator = ScriptedOperator(config)
    results = {}
    try:
        for skill, uses in skill_instances(robot).items():
            wins = 0
            for seed in range(n_seeds):
                composition, index = uses[seed % len(uses)]
                wins += operator.demo_subtask(scene, composition, index, seed).success
            results[skill] = (wins, n_seeds)
    finally:
        scene.close()
    return results


def main(argv: list[str] | None = None) -> None:
    """`python -m robocoach_skills.operator --robot franka --seeds 50`: print per-skill success."""
    import argparse
    import time

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--robot", default="franka")
    parser.add_argument("--seeds", type=int, default=50)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    for skill, (wins, n) in measure_skill_success(args.robot, args.seeds).items():
        print(f"{args.robot:7s} {skill:14s} {wins:3d}/{n} = {wins / n:.0%}")
    print(f"({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()

"""`coach` node: the RIDI loop (`robocoach_world.coach.loop`) over the ROS graph.

The loop runs in a worker thread; its ports are ROS calls:

- Imagine: real initial observations (the sim is reset to each seed with `ResetScene`, then the
  newest camera frame and joint state are taken; on hardware the current ones), then an `Imagine`
  goal to the world model; its FailureRecords become TrialRecords, and the frames and judge traces
  it returns of the first failures per subtask become the scorecard's failure clips.
- Collect: the request is published on the operator topic (reliable, transient-local: a station that
  starts later still sees it) and a `CollectDemo` goal is sent to the station; accepted episodes count.
- Improve: with `acceptance_trials` > 0, each retrained adapter and its parent are first loaded on the
  executor in turn and run from the check seeds (`ExecuteTask`, the scene reset to each seed: on
  hardware, where nothing resets the scene, leave it at 0); the versions the round keeps are then
  activated on the executor and on the world model (`LoadAdapter`).
- Every closed round is published as a `CoachRound`.

State is persisted by `CoachState` after every step, so killing this process at any moment and
starting it again resumes the round. With `exit_when_done` the process ends once the budget is spent,
or with exit status EXIT_STOPPED_EARLY when an error stops the loop first (state kept: a restart resumes).
"""

from __future__ import annotations

import functools
import logging
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import rclpy
import torch
from action_msgs.msg import GoalStatus
from rclpy.action import ActionClient
from rclpy.action.client import ClientGoalHandle
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.duration import Duration
from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data
from rclpy.task import Future
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import String
from unique_identifier_msgs.msg import UUID

from robocoach_msgs.action import CollectDemo, ExecuteTask, Imagine
from robocoach_msgs.msg import CoachRound, DemoRequest
from robocoach_msgs.srv import LoadAdapter, ResetScene
from robocoach_skills.bootstrap import load_experts
from robocoach_skills.composition import Composition
from robocoach_skills.constants import (
    ACTION_COLLECT_DEMO,
    ACTION_EXECUTE_TASK,
    ACTION_IMAGINE,
    OBS_IMAGE,
    OBS_PROPRIO,
    SERVICE_LOAD_ADAPTER,
    SERVICE_RESET_SCENE,
    SERVICE_WORLD_LOAD_ADAPTER,
    TOPIC_CAMERA,
    TOPIC_COACH_ROUNDS,
    TOPIC_COACH_SCORECARD,
    TOPIC_DEMO_REQUESTS,
    TOPIC_JOINT_STATES,
)
from robocoach_skills.data.store import EpisodeStore
from robocoach_skills.nodes.conversions import composition_to_msg, image_to_msg, msg_to_image, subtask_to_msg
from robocoach_skills.nodes.spin import spin_node
from robocoach_skills.nodes.station import OPERATOR_QOS
from robocoach_skills.tasks import get_composition, training_compositions
from robocoach_world.calibration import ImaginationCalibration
from robocoach_world.coach.acceptance import AcceptanceConfig, subtask_outcome
from robocoach_world.coach.allocation import AllocationConfig
from robocoach_world.coach.diagnosis import DiagnosisConfig
from robocoach_world.coach.improve import ImproveConfig
from robocoach_world.coach.loop import Coach, CoachConfig, Collected, Imagined
from robocoach_world.coach.scorecard import FailureClip, ScorecardConfig
from robocoach_world.coach.state import CoachState, RequestState
from robocoach_world.imagine import INITIAL_STATES, ImaginationConfig, imagination_seeds
from robocoach_world.records import SOURCE_DEPLOYED, SOURCE_IMAGINED, TrialRecord

STATE_FILE = "coach_state.json"
# With exit_when_done: how long the coach waits for subscribers to acknowledge its last requests, rounds
# and scorecard before the process ends (a message still queued then is lost, reliable QoS or not) [s]
FLUSH_TIMEOUT_S = 5.0
EXIT_STOPPED_EARLY = 3  # the process's exit status when an error stopped coaching (state kept)
GOAL_ENDED = (GoalStatus.STATUS_SUCCEEDED, GoalStatus.STATUS_CANCELED, GoalStatus.STATUS_ABORTED)


class CallFailedError(RuntimeError):
    """A ROS call the coach depends on failed; the round stays where the state file says."""


class RosPorts:
    """CoachPorts over the ROS graph (see the module docstring)."""

    def __init__(self, node: CoachNode) -> None:
        self.node = node

    # ------------------------------------------------------------------ Imagine
    def imagine(self, composition: Composition, versions: dict[str, int]) -> Imagined:
        node = self.node
        seeds = imagination_seeds(node.initial_states)
        observations = [node.initial_observation(composition, seed) for seed in seeds]
        goal = Imagine.Goal(
            composition=composition_to_msg(composition),
            initial_frames=[image_to_msg(o[OBS_IMAGE]) for o in observations],
            initial_proprio=[JointState(position=o[OBS_PROPRIO].tolist()) for o in observations],
            initial_state_seeds=seeds,
            num_rollouts=node.num_rollouts,
            horizon=node.horizon,
            num_world_seeds=node.num_world_seeds,
            failure_clips=node.clips_per_pair,
        )
        result = node.run_goal(
            node.imagine_client, goal, node.imagine_timeout_s, f"Imagine {composition.name}"
        )
        records = [
            TrialRecord(
                r.composition,
                r.robot,
                tuple(r.expert_skills),
                tuple(int(v) for v in r.expert_versions),
                r.first_failed_index,
                r.initial_state_id,
                r.seed,
                SOURCE_IMAGINED if r.source == r.SOURCE_IMAGINED else SOURCE_DEPLOYED,
                r.valid,
            )
            for r in result.records
        ]
        return Imagined(records, _clips(result, composition, records))

    # ------------------------------------------------------------------ Collect
    def collect(self, request: RequestState) -> Collected:
        msg = DemoRequest(
            request_id=request.request_id,
            robot=request.robot,
            subtask=subtask_to_msg(request.subtask),
            composition=request.composition,
            count=request.count,  # the total: the station records only what its store lacks for the id
            initial_state_seeds=list(request.seeds),
            reason=request.reason,
            priority=float(request.priority),
            round=request.round,
        )
        msg.header.stamp = self.node.get_clock().now().to_msg()
        self.node.request_pub.publish(msg)
        node = self.node
        try:
            status, result = node.goal_outcome(
                node.collect_client, CollectDemo.Goal(request=msg), node.collect_timeout_s,
                f"CollectDemo {request.request_id}",
            )  # fmt: skip
        except CallFailedError as error:  # busy, unreachable or silent: nothing is rejected
            time.sleep(node.retry_wait_s)
            return Collected([], str(error), retry=True)
        accepted = [e.episode_id for e in result.episodes if e.accepted]
        if status != GoalStatus.STATUS_SUCCEEDED or not result.success:  # the station's own, explicit answer
            return Collected(accepted, result.message or f"the station ended the goal with status {status}")
        return Collected(accepted)

    # ------------------------------------------------------------------ Improve
    def deploy_subtask(
        self, composition: Composition, index: int, versions: dict[str, int], seeds: Sequence[int]
    ) -> list[float | None]:
        node = self.node
        prefix = composition.up_to(index)
        for skill in dict.fromkeys(s.skill for s in prefix.subtasks):
            self._load(node.executor_adapters, skill, versions[skill])
        progress: list[float | None] = []
        for seed in seeds:
            goal = ExecuteTask.Goal(
                composition=composition_to_msg(prefix), initial_state_seed=seed, reset_scene=node.reset_scene
            )
            what = f"ExecuteTask {prefix.name} up to {prefix.subtasks[index]} (check seed {seed})"
            subtasks = node.run_goal(node.execute_client, goal, node.check_timeout_s, what).subtasks
            if len(subtasks) != len(prefix.subtasks):
                raise CallFailedError(f"{what}: {len(subtasks)} subtasks in the result")
            progress.append(
                subtask_outcome([p.completed for p in subtasks], [p.progress for p in subtasks], index)
            )
        return progress

    def push_adapters(self, versions: Mapping[str, int]) -> None:
        for skill, version in versions.items():
            for client in (self.node.executor_adapters, self.node.world_adapters):
                self._load(client, skill, version)

    def _load(self, client, skill: str, version: int) -> None:
        response = self.node.call(
            client, LoadAdapter.Request(skill=skill, version=version), f"LoadAdapter {skill} v{version}"
        )
        if not response.success:
            raise CallFailedError(f"{client.srv_name} refused {skill} v{version}: {response.message}")

    def publish_round(self, entry: dict) -> None:
        node = self.node
        diagnosis = entry["summary"].get("diagnosis", {})
        pairs = diagnosis.get("pairs", [])
        compositions = diagnosis.get("compositions", [])
        allocation = entry["allocation"].get("demos", [])
        msg = CoachRound(
            round=entry["round"],
            robot=node.robot,
            failure_skills=[p["pair"] for p in pairs],
            failure_counts=[int(p["first_failures"]) for p in pairs],
            failure_mass=[float(p["mass"]) for p in pairs],
            allocation_skills=[a["pair"] for a in allocation],
            allocation_counts=[int(a["n_demos"]) for a in allocation],
            compositions=[c["composition"] for c in compositions],
            imagined_success=[_rate(c["success_rate"]) for c in compositions],
            demos_spent=node.state.demos_spent,
            demo_budget=node.state.budget,
        )
        msg.header.stamp = node.get_clock().now().to_msg()
        node.round_pub.publish(msg)
        node.scorecard_pub.publish(String(data=entry["summary"].get("scorecard", "")))


def _clips(result: Imagine.Result, composition: Composition, records: list[TrialRecord]) -> list[FailureClip]:
    """The failure clips in an Imagine result: its frame blocks with their judge traces."""
    clips, start = [], 0
    for trial, count in zip(result.frame_trials, result.frame_counts, strict=True):
        end = start + count
        clips.append(
            FailureClip.of_trial(
                composition,
                records[trial],
                np.stack([msg_to_image(f) for f in result.frames[start:end]]),
                np.asarray(result.frame_progress[start:end], dtype=np.float32),
                np.asarray(result.frame_subtasks[start:end], dtype=np.int64),
            )
        )
        start = end
    return clips


def _rate(value: float | None) -> float:
    """A success rate for a message field: NaN where no valid trial gave one."""
    return float("nan") if value is None else float(value)


class CoachNode(Node):
    def __init__(self) -> None:
        super().__init__("coach")
        declare = self.declare_parameter
        self.robot = declare("robot", "franka").value  # embodiment coached
        names = list(declare("compositions", [""]).value)  # [""] = every training composition
        experts_dir = Path(declare("experts_dir", "").value)  # backbone + adapters (shared registry)
        store_dir = Path(declare("store", "").value)  # the episode store demos are written to
        state_dir = Path(declare("state_dir", "runs/demo/coach").value)  # coach_state.json lives here
        # the run's imagination calibration (offboard stage, step 5): calibrated diagnosis; "": raw
        calibration_file = declare("calibration_file", "").value
        # Coaching rules default to their dataclasses (config/robocoach.yaml sets the same values).
        budget = declare("budget", CoachConfig.budget).value  # subtask demos over all rounds
        demos_per_round = declare("demos_per_round", CoachConfig.demos_per_round).value
        self.initial_states = declare("initial_states", INITIAL_STATES).value  # real frames per composition
        self.num_rollouts = declare("num_rollouts", ImaginationConfig.num_rollouts).value  # per composition
        self.horizon = declare("horizon", ImaginationConfig.horizon).value  # imagined policy steps per trial
        self.num_world_seeds = declare("num_world_seeds", ImaginationConfig.num_world_seeds).value
        self.reset_scene = declare("reset_scene", True).value  # sim: reset to each seed; hardware: False
        min_reach = declare("min_reach", DiagnosisConfig.min_reach).value  # fewer valid trials: no demos
        top_sites = declare("top_sites", DiagnosisConfig.top_sites).value  # initial states per pair's demos
        strategy = declare("allocation", AllocationConfig.strategy).value  # top_m | proportional
        top_m = declare("top_m", AllocationConfig.top_m).value
        # Set aside experts whose demos did not lift imagined success by this much; < 0: never.
        min_gain = declare("allocation_min_gain", AllocationConfig.min_gain).value
        train_steps = declare("train_steps", ImproveConfig.steps).value  # adapter steps per retrained skill
        dense_steps = declare("dense_steps", ImproveConfig.dense_steps).value  # ... then on fixed vision
        replay_ratio = declare("replay_ratio", ImproveConfig.replay_ratio).value
        # deployed trials per version checking each update before it is kept (coach.acceptance); 0: none
        acceptance_trials = declare("acceptance_trials", AcceptanceConfig.trials).value
        tolerance = declare("acceptance_tolerance", AcceptanceConfig.tolerance).value
        self.check_timeout_s = declare("check_timeout_s", 300.0).value  # one check trial on the executor
        self.clips_per_pair = declare("clips_per_pair", ScorecardConfig.clips_per_pair).value  # 0: none
        self.imagine_timeout_s = declare("imagine_timeout_s", 1800.0).value
        self.collect_timeout_s = declare("collect_timeout_s", 3600.0).value  # a person may take a while
        self.retry_wait_s = declare("retry_wait_s", 5.0).value  # before asking a busy station again
        self.resend_after_s = declare("resend_after_s", 10.0).value  # an unanswered request is sent again
        self.exit_when_done = declare("exit_when_done", False).value
        torch.set_num_threads(declare("torch_threads", 1).value)
        if not str(experts_dir) or not str(store_dir):
            raise ValueError("parameters experts_dir and store are required")

        compositions = (
            [get_composition(self.robot, n) for n in names if n]
            if any(names)
            else training_compositions(self.robot)
        )
        library, registry, versions, _ = load_experts(experts_dir)
        config = CoachConfig(
            budget=budget,
            demos_per_round=demos_per_round,
            diagnosis=DiagnosisConfig(min_reach=min_reach, top_sites=top_sites),
            allocation=AllocationConfig(
                strategy=strategy, top_m=top_m, min_gain=min_gain if min_gain >= 0 else None
            ),
            improve=ImproveConfig(steps=train_steps, dense_steps=dense_steps, replay_ratio=replay_ratio),
            acceptance=AcceptanceConfig(trials=acceptance_trials, tolerance=tolerance),
            scorecard=ScorecardConfig(clips_per_pair=self.clips_per_pair),
        )
        self.state = CoachState.open(state_dir / STATE_FILE, budget, versions)
        calibration = ImaginationCalibration.load(Path(calibration_file)) if calibration_file else None
        self.coach = Coach(
            config, self.state, compositions, library, registry, EpisodeStore(store_dir), RosPorts(self),
            calibration,
        )  # fmt: skip

        group = ReentrantCallbackGroup()
        self._sensor = threading.Condition()
        self._image: np.ndarray | None = None
        self._joints: np.ndarray | None = None
        self._stamp = 0.0
        self.create_subscription(
            Image, TOPIC_CAMERA, self._on_image, qos_profile_sensor_data, callback_group=group
        )
        self.create_subscription(
            JointState, TOPIC_JOINT_STATES, self._on_joints, qos_profile_sensor_data, callback_group=group
        )
        self.request_pub = self.create_publisher(DemoRequest, TOPIC_DEMO_REQUESTS, OPERATOR_QOS)
        self.round_pub = self.create_publisher(CoachRound, TOPIC_COACH_ROUNDS, OPERATOR_QOS)
        self.scorecard_pub = self.create_publisher(String, TOPIC_COACH_SCORECARD, OPERATOR_QOS)
        self.reset_client = self.create_client(ResetScene, SERVICE_RESET_SCENE, callback_group=group)
        self.executor_adapters = self.create_client(LoadAdapter, SERVICE_LOAD_ADAPTER, callback_group=group)
        self.world_adapters = self.create_client(
            LoadAdapter, SERVICE_WORLD_LOAD_ADAPTER, callback_group=group
        )
        self.imagine_client = ActionClient(self, Imagine, ACTION_IMAGINE, callback_group=group)
        self.collect_client = ActionClient(self, CollectDemo, ACTION_COLLECT_DEMO, callback_group=group)
        self.execute_client = ActionClient(self, ExecuteTask, ACTION_EXECUTE_TASK, callback_group=group)
        self.get_logger().info(
            f"coaching {self.robot} on {[c.name for c in compositions]}: round {self.state.round}, "
            f"{self.state.demos_spent}/{budget} demos spent, phase {self.state.phase}"
        )
        self.stopped_early = False  # an error stopped the loop before the budget was spent
        self._worker = threading.Thread(target=self._run, daemon=True)
        self._worker.start()

    # ------------------------------------------------------------------ the loop
    def _run(self) -> None:
        try:
            while not self.coach.finished and rclpy.ok(context=self.context):
                action = self.coach.step()
                self.get_logger().info(
                    f"step {action} done: round {self.state.round}, phase {self.state.phase}, "
                    f"{self.state.demos_spent}/{self.state.budget} demos spent"
                )
            self.get_logger().info(f"coaching finished after {self.state.round} rounds")
        except (CallFailedError, TimeoutError, ValueError) as error:
            self.stopped_early = True
            self.get_logger().error(
                f"coaching stopped: {error} (raised at {_where(error)}; state kept in {self.state.path}; "
                "restart resumes)"
            )
        if self.exit_when_done:
            self._flush_publications()
            rclpy.try_shutdown(context=self.context)

    def _flush_publications(self) -> None:
        """Wait, at most FLUSH_TIMEOUT_S each, until every subscriber has acknowledged what was published."""
        for publisher in (self.request_pub, self.round_pub, self.scorecard_pub):
            if not publisher.wait_for_all_acked(Duration(seconds=FLUSH_TIMEOUT_S)):
                self.get_logger().warning(
                    f"{publisher.topic_name}: not acknowledged by every subscriber within {FLUSH_TIMEOUT_S} s"
                )

    # ------------------------------------------------------------------ calls
    def call(self, client, request, what: str, timeout_s: float = 30.0):
        """A service's response. The services the coach calls (LoadAdapter, ResetScene) are idempotent,
        so a request left unanswered for `resend_after_s` is sent again (see `await_answer`)."""
        if not client.wait_for_service(timeout_sec=timeout_s):
            raise CallFailedError(f"{what}: service {client.srv_name} is not available")
        send = functools.partial(client.call_async, request)
        return await_answer(send, timeout_s, what, self.resend_after_s, self._warn)

    def goal_outcome(self, client: ActionClient, goal, timeout_s: float, what: str):
        """(final status, result) of a goal (see `goal_outcome`)."""
        return goal_outcome(client, goal, timeout_s, what, self.resend_after_s, self._warn)

    def _warn(self, text: str) -> None:
        self.get_logger().warning(text)

    def run_goal(self, client: ActionClient, goal, timeout_s: float, what: str):
        """The result of a goal that must succeed."""
        status, result = self.goal_outcome(client, goal, timeout_s, what)
        if status != GoalStatus.STATUS_SUCCEEDED:
            raise CallFailedError(f"{what}: goal ended with status {status}")
        return result

    # ------------------------------------------------------------------ initial observations
    def _on_image(self, msg: Image) -> None:
        with self._sensor:
            self._image = msg_to_image(msg)
            self._sensor.notify_all()

    def _on_joints(self, msg: JointState) -> None:
        with self._sensor:
            self._joints, self._stamp = np.asarray(msg.position, dtype=np.float32), time.monotonic()
            self._sensor.notify_all()

    def initial_observation(self, composition: Composition, seed: int, timeout_s: float = 10.0) -> dict:
        """The robot's camera frame and joint state in the initial state `seed` of `composition`."""
        if self.reset_scene:
            response = self.call(
                self.reset_client, ResetScene.Request(composition=composition.name, seed=seed), "ResetScene"
            )
            if not response.success:
                raise CallFailedError(f"ResetScene {composition.name} seed {seed}: {response.message}")
        after = time.monotonic()
        with self._sensor:
            self._image = None  # a frame published before the reset must not be taken
            if not self._sensor.wait_for(lambda: self._image is not None and self._stamp > after, timeout_s):
                raise CallFailedError(f"no camera frame and joint state within {timeout_s} s after reset")
            return {OBS_IMAGE: self._image, OBS_PROPRIO: self._joints.copy()}


def await_answer(
    send: Callable[[], Future],
    timeout_s: float,
    what: str,
    resend_after_s: float,
    warn: Callable[[str], None],
    resend: Callable[[], bool] = lambda: True,
):
    """The result of the first of `send()`'s futures to complete within `timeout_s`; CallFailedError if
    none does. Every `resend_after_s` without one, the request is sent again where `resend()` allows.

    DDS drops a response whose reader the server has not matched yet, so a new client's first request
    (a restarted coach's) can stay unanswered forever however long one waits; asking again cures it.

    >>> from rclpy.task import Future
    >>> lost, answered = Future(), Future()
    >>> answered.set_result("v1 active")
    >>> sent = iter([lost, answered])
    >>> await_answer(lambda: next(sent), 1.0, "LoadAdapter", 0.01, warn=lambda _: None)
    'v1 active'
    """
    deadline = time.monotonic() + timeout_s
    answered = threading.Event()

    def ask() -> Future:
        future = send()
        future.add_done_callback(lambda _f: answered.set())
        return future

    futures = [ask()]
    while not answered.wait(max(0.0, min(resend_after_s, deadline - time.monotonic()))):
        if time.monotonic() >= deadline:
            raise CallFailedError(f"{what}: no answer within {timeout_s:.0f} s")
        if resend():
            warn(f"{what}: no answer after {resend_after_s:g} s, asking again")
            futures.append(ask())
    return next(f for f in futures if f.done()).result()


def goal_outcome(
    client: ActionClient,
    goal,
    timeout_s: float,
    what: str,
    resend_after_s: float,
    warn: Callable[[str], None],
):
    """(final status, result) of a goal; CallFailedError if it could not be sent, was not accepted, or
    never ended within `timeout_s`.

    The goal is sent under one goal id (see `send_goal`: a copy never becomes a second goal); its
    result is asked for again when the status topic says the goal ended and no result came within
    `resend_after_s`."""
    if not client.wait_for_server(timeout_sec=30.0):
        raise CallFailedError(f"{what}: action server is not available")
    handle = send_goal(client, goal, 30.0, what, resend_after_s, warn)
    busy = CallFailedError(f"{what}: goal not accepted (the server is busy)")
    if not handle.accepted:
        raise busy
    answer = await_answer(
        handle.get_result_async, timeout_s, f"{what} result", resend_after_s, warn,
        resend=lambda: handle.status in GOAL_ENDED,
    )  # fmt: skip
    if answer.status == GoalStatus.STATUS_UNKNOWN:  # the server holds no goal of that id
        raise busy
    return answer.status, answer.result


def send_goal(
    client: ActionClient,
    goal,
    timeout_s: float,
    what: str,
    resend_after_s: float,
    warn: Callable[[str], None],
) -> ClientGoalHandle:
    """The handle of `goal` sent to `client`'s server; CallFailedError if no answer comes in `timeout_s`.

    A SendGoal response is lost like any other (see `await_answer`), so the goal is sent again, always
    under the same goal id: a server that never got it accepts the copy, and one already running it
    rejects the copy (a goal id is accepted once), so no goal ever runs twice. A copy's rejection
    thus does not say whether the goal runs; the returned handle then counts it as accepted, and the
    result request settles it (a server holding no goal of that id answers STATUS_UNKNOWN at once).
    """
    goal_id = UUID(uuid=list(uuid.uuid4().bytes))
    copies = 0

    def send() -> Future:
        nonlocal copies
        copies += 1
        return client.send_goal_async(goal, goal_uuid=goal_id)

    handle = await_answer(send, timeout_s, what, resend_after_s, warn)
    if handle.accepted or copies == 1:
        return handle
    return ClientGoalHandle(client, goal_id, SimpleNamespace(accepted=True, stamp=handle.stamp))


def _where(error: BaseException, frames: int = 3) -> str:
    """The innermost frames an exception passed through, as "file:line in function" (one line for the log).

    A ValueError from bad input and one from a library's own race read the same without it.

    >>> def remove_missing(items): items.remove(1)
    >>> try:
    ...     remove_missing([])
    ... except ValueError as error:
    ...     print(_where(error, frames=1))
    <doctest ...>:1 in remove_missing
    """
    stack = traceback.extract_tb(error.__traceback__)[-frames:]
    return " <- ".join(f"{Path(f.filename).name}:{f.lineno} in {f.name}" for f in reversed(stack))


def main(args: list[str] | None = None) -> None:
    # the loop's own log lines (what was imagined, requested, retrained) go to the node's output too
    logging.basicConfig(level=logging.INFO, format="[%(levelname)s] [%(name)s]: %(message)s")
    node = spin_node(CoachNode, args, threads=4)
    if node is not None and node.stopped_early:  # with exit_when_done, tell the launcher it did not finish
        sys.exit(EXIT_STOPPED_EARLY)


if __name__ == "__main__":
    main()

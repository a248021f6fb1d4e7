"""`skill_executor` node: executes task compositions on the robot by chaining skill experts.

An `ExecuteTask` goal runs the router (`robocoach_skills.router`) over the ROS robot interface: each
policy tick takes the newest camera frame and joint state, asks the active subtask's expert for an
action, clips it to the arm's position and velocity limits, and publishes it as a joint command.
Feedback names the current subtask and its progress; cancel stops the trial and holds the arm.
`LoadAdapter` swaps an expert's adapter version without a restart (a failed load keeps the old
version), `GetExperts` lists the active versions, and a watchdog commands "hold position" whenever
inference stalls past `watchdog_s` while a goal runs.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import torch
from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.node import Node

from robocoach_msgs.action import ExecuteTask
from robocoach_msgs.msg import ExpertInfo, SubtaskProgress
from robocoach_msgs.srv import GetExperts, LoadAdapter, ResetScene
from robocoach_skills.bootstrap import load_experts
from robocoach_skills.composition import Subtask, UnknownSkillError
from robocoach_skills.constants import (
    ACTION_EXECUTE_TASK,
    SERVICE_GET_EXPERTS,
    SERVICE_LOAD_ADAPTER,
    SERVICE_RESET_SCENE,
)
from robocoach_skills.nodes.adapter_service import serve_load_adapter
from robocoach_skills.nodes.conversions import msg_to_composition
from robocoach_skills.nodes.ros_robot import OBS_WAIT_S, RosRobot
from robocoach_skills.nodes.spin import spin_node
from robocoach_skills.robots import RobotError
from robocoach_skills.router import OUTCOME_SUCCESS, Router, RouterConfig, TrialMonitor
from robocoach_skills.sim.arms import get_arm
from robocoach_skills.skill_policy import ChunkExecutionConfig, LibraryPolicy


class GoalCanceledError(Exception):
    """Raised inside the router loop when the client cancels the goal."""


class LockedPolicy(LibraryPolicy):
    """A LibraryPolicy whose inference steps hold a lock that adapter swaps also take."""

    def __init__(self, lock: threading.Lock, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.lock = lock

    def act(
        self, obs: dict, subtask: Subtask, robot: str, need_done: bool = True
    ) -> tuple[np.ndarray, float]:
        with self.lock:
            return super().act(obs, subtask, robot, need_done)


class FeedbackMonitor(TrialMonitor):
    """Streams ExecuteTask feedback and turns a cancel request into GoalCanceledError."""

    reads_done_probability = True  # shown as the subtask's progress

    def __init__(self, goal_handle, skills: list[str]) -> None:
        self.goal_handle, self.skills = goal_handle, skills
        self.progress: list[SubtaskProgress] = [
            SubtaskProgress(index=i, skill=s) for i, s in enumerate(skills)
        ]
        self._start = time.monotonic()

    def on_subtask_start(self, index: int) -> None:
        self._start = time.monotonic()

    def on_subtask_end(self, index: int, confirmed: bool) -> None:
        self.progress[index].completed = confirmed
        if confirmed:
            self.progress[index].progress = 1.0

    def on_step(self, index: int, obs: dict, done_prob: float) -> None:
        if self.goal_handle.is_cancel_requested:
            raise GoalCanceledError
        current = self.progress[index]
        current.progress = float(done_prob)  # the completion detector's confidence until the judge exists
        current.elapsed = time.monotonic() - self._start
        feedback = ExecuteTask.Feedback(
            current_index=index, current_skill=self.skills[index], progress=current
        )
        self.goal_handle.publish_feedback(feedback)


class SkillExecutor(Node):
    def __init__(self) -> None:
        super().__init__("skill_executor")
        declare = self.declare_parameter
        robot = declare("robot", "franka").value  # embodiment: franka or piper
        experts_dir = declare("experts_dir", "").value  # backbone + adapters + deadlines
        policy_rate = declare("policy_rate_hz", 10.0).value  # expert steps per second [Hz]
        self.watchdog_s = declare("watchdog_s", 0.5).value  # hold if no command went out for this long [s]
        n_action_steps = declare(
            "n_action_steps", ChunkExecutionConfig.n_action_steps
        ).value  # chunk steps executed per inference
        deadline_steps = declare("deadline_steps", 150).value  # where no deadline was calibrated [steps]
        detector = declare("detector", "done_head").value  # done_head, or judge: imagination's rule
        done_threshold = declare("done_threshold", RouterConfig.done_threshold).value  # done_head: p(done)
        done_patience = declare(
            "done_patience", RouterConfig.done_patience
        ).value  # done_head: steps above it
        judge_dir = declare("judge_dir", "").value  # the progress judge (with detector judge)
        torch.set_num_threads(declare("torch_threads", 1).value)  # 1 is fastest beside the sim on 2 cores
        if not experts_dir:
            raise ValueError("parameter experts_dir is required (a directory written by bootstrap training)")

        self.library, self.registry, versions, deadlines = load_experts(Path(experts_dir))
        self._model_lock = threading.Lock()  # adapter swaps happen between inference steps, never during one
        self.policy = LockedPolicy(
            self._model_lock, self.library, versions, ChunkExecutionConfig(n_action_steps)
        )
        detector_args = {}
        if detector == "judge":  # the offboard package's judge, run here so switching costs no round trip
            from robocoach_world.judge.detector import judge_detector_args

            detector_args, judged = judge_detector_args(Path(judge_dir), robot)
            deadlines = judged.per_skill(robot, self.library.skills)
        self.router = Router(
            self.policy,
            RouterConfig(
                detector=detector,
                done_threshold=done_threshold,
                done_patience=done_patience,
                deadline_steps=deadline_steps,
                skill_deadline_steps=deadlines,
            ),
            detector_args,
        )
        self._goal_active = False
        self._goal_start = 0.0  # monotonic start of the running goal: the watchdog's grace [s]

        sensors = ReentrantCallbackGroup()
        # The robot_driver owns the arm; sensor data older than OBS_WAIT_S aborts a goal, as it always has.
        self.robot = RosRobot(
            self,
            get_arm(robot),
            1.0 / policy_rate,
            camera_size=self.library.config.image_size,
            feedback_timeout_s=OBS_WAIT_S,
            callback_group=sensors,
        )
        self._reset_client = self.create_client(ResetScene, SERVICE_RESET_SCENE, callback_group=sensors)
        self.create_service(LoadAdapter, SERVICE_LOAD_ADAPTER, self._on_load_adapter, callback_group=sensors)
        self.create_service(GetExperts, SERVICE_GET_EXPERTS, self._on_get_experts, callback_group=sensors)
        self.create_timer(
            self.watchdog_s / 2, self._watchdog, callback_group=MutuallyExclusiveCallbackGroup()
        )
        self._action_server = ActionServer(
            self,
            ExecuteTask,
            ACTION_EXECUTE_TASK,
            execute_callback=self._execute,
            goal_callback=self._on_goal,
            cancel_callback=lambda _goal: CancelResponse.ACCEPT,
            callback_group=MutuallyExclusiveCallbackGroup(),
        )
        self.get_logger().info(f"{robot} executor: experts {sorted(versions.items())} from {experts_dir}")

    # ------------------------------------------------------------------ the arm
    def _link(self) -> None:
        """Connect to the driver before a goal; reconnecting clears a fault a previous goal latched (lost
        feedback), once the driver is heard again. RobotError when it is not."""
        if self.robot.is_connected and self.robot.health().ok:
            return
        if self.robot.is_connected:
            self.robot.disconnect()
        self.robot.connect()

    def _watchdog(self) -> None:
        quiet = time.monotonic() - max(self.robot.last_command_time, self._goal_start)
        if self._goal_active and quiet > self.watchdog_s:
            self.get_logger().warning(f"no command for {self.watchdog_s} s (inference stalled?): holding")
            self.robot.hold()

    # ------------------------------------------------------------------ ExecuteTask
    def _on_goal(self, goal: ExecuteTask.Goal) -> GoalResponse:
        if self._goal_active:
            self.get_logger().warning("ExecuteTask goal rejected: a task is already running")
            return GoalResponse.REJECT
        return GoalResponse.ACCEPT

    def _execute(self, goal_handle) -> ExecuteTask.Result:
        result = ExecuteTask.Result(first_failed_index=-1)
        start = time.monotonic()
        try:
            composition = msg_to_composition(goal_handle.request.composition)
            if composition.robot != self.robot.arm.name:
                raise ValueError(
                    f"composition is for {composition.robot!r}, this executor runs {self.robot.arm.name!r}"
                )
            route = self.router.route(composition)
        except (ValueError, UnknownSkillError) as error:
            return self._finish(goal_handle, result, "ERROR", str(error), start, abort=True)
        if goal_handle.request.reset_scene:
            self._reset_scene(composition.name, goal_handle.request.initial_state_seed)
        monitor = FeedbackMonitor(goal_handle, [skill for _, skill in route])
        try:
            self._link()
        except RobotError as error:
            return self._finish(goal_handle, result, "ERROR", str(error), start, abort=True)
        self._goal_active = True
        self._goal_start = time.monotonic()
        late_before = self.robot.late_ticks
        try:
            trial = self.router.run(self.robot, composition, goal_handle.request.initial_state_seed, monitor)
        except GoalCanceledError:
            self.robot.hold()
            result.subtasks = monitor.progress
            return self._finish(
                goal_handle, result, "CANCELED", "canceled by the client", start, canceled=True
            )
        except (TimeoutError, RobotError) as error:
            self.robot.hold()
            return self._finish(goal_handle, result, "ERROR", str(error), start, abort=True)
        finally:
            self._goal_active = False
            if late := self.robot.late_ticks - late_before:
                self.get_logger().warning(
                    f"{late} policy ticks came late (inference or sensors slower than the policy rate); "
                    "each restarted the schedule"
                )
        self.robot.hold()
        result.subtasks = monitor.progress
        result.success = trial.outcome == OUTCOME_SUCCESS
        result.first_failed_index = trial.timed_out_index
        return self._finish(goal_handle, result, trial.outcome, trial.timeout_label, start)

    def _finish(
        self, goal_handle, result, outcome: str, message: str, start: float, abort=False, canceled=False
    ):
        result.outcome, result.message, result.duration = outcome, message, time.monotonic() - start
        self.get_logger().info(f"ExecuteTask {outcome}: {message}")
        if canceled:
            goal_handle.canceled()
        elif abort:
            goal_handle.abort()
        else:
            goal_handle.succeed()
        return result

    def _reset_scene(self, composition: str, seed: int) -> None:
        if not self._reset_client.wait_for_service(timeout_sec=OBS_WAIT_S):
            raise TimeoutError(f"{SERVICE_RESET_SCENE} is not available (reset_scene works on the sim only)")
        done = threading.Event()
        future = self._reset_client.call_async(ResetScene.Request(composition=composition, seed=seed))
        future.add_done_callback(lambda _f: done.set())
        if not done.wait(OBS_WAIT_S) or not future.result().success:
            raise TimeoutError(
                f"scene reset failed: {future.result().message if future.done() else 'no answer'}"
            )

    # ------------------------------------------------------------------ experts
    def _on_load_adapter(
        self, request: LoadAdapter.Request, response: LoadAdapter.Response
    ) -> LoadAdapter.Response:
        return serve_load_adapter(
            self, self._model_lock, self.registry, self.library, self.policy.versions, request, response
        )

    def _on_get_experts(
        self, request: GetExperts.Request, response: GetExperts.Response
    ) -> GetExperts.Response:
        for info in self.registry.list():
            if request.skill and info.skill != request.skill:
                continue
            response.experts.append(
                ExpertInfo(
                    skill=info.skill,
                    robot=info.robot,
                    adapter_version=info.adapter_version,
                    parent_version=info.parent_version
                    if info.parent_version is not None
                    else info.adapter_version,
                    demos_used=info.demos_used,
                    adapter_hash=info.adapter_hash,
                    metric_names=list(info.metrics),
                    metric_values=[float(v) for v in info.metrics.values()],
                )
            )
        return response


def main(args: list[str] | None = None) -> None:
    spin_node(SkillExecutor, args, threads=4)


if __name__ == "__main__":
    main()
